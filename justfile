# exec-server tasks; the README's commands use cargo directly.

build:
    cargo build --release

# The binary we ship: the `ship` profile, linked statically on Linux.
ship:
    RUSTFLAGS='-C target-feature=+crt-static' cargo build --locked --profile ship --bin exec-server --target "$(rustc -vV | sed -n 's/^host: //p')"

install:
    RUSTFLAGS='-C target-feature=+crt-static' cargo install --locked --profile ship --path . --target "$(rustc -vV | sed -n 's/^host: //p')"

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
    EXEC_SERVER_BIN="${EXEC_SERVER_BIN:-target/$(rustc -vV | sed -n 's/^host: //p')/ship/exec-server}" cargo bench --bench throughput
