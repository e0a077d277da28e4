# exec-server tasks; the README's commands use cargo directly.

build:
    cargo build --release

test:
    cargo test

demo:
    cargo run --release -- --on-eof wait < fixtures/demo.jsonl

fmt:
    cargo fmt

lint:
    cargo fmt --check
    cargo clippy --all-targets -- -D warnings

bench:
    cargo bench --bench throughput
