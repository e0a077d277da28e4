# exec-server tasks; the README's commands use cargo directly.

build:
    cargo build --release

# The binary we ship: the `ship` profile (whole-program LTO).
ship:
    cargo build --locked --profile ship --bin exec-server

install:
    cargo install --locked --profile ship --path .

test:
    cargo test

demo:
    cargo run --release -- --on-eof wait < fixtures/demo.jsonl

fmt:
    cargo fmt

lint:
    cargo fmt --check
    cargo clippy --all-targets -- -D warnings

# Measures the shipped binary (`EXEC_SERVER_BIN=path just bench` for another).
bench: ship
    EXEC_SERVER_BIN="${EXEC_SERVER_BIN:-target/ship/exec-server}" cargo bench --bench throughput
