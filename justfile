# exec-server tasks; the README's commands use cargo directly.

build:
    cargo build --release

# The binary we ship: the `ship` profile (whole-program LTO).
ship:
    cargo build --locked --profile ship --bin exec-server

# The static Linux binary (musl, mimalloc): target/x86_64-unknown-linux-musl/ship/exec-server.
static:
    rustup target add x86_64-unknown-linux-musl
    cargo build --locked --profile ship --bin exec-server --target x86_64-unknown-linux-musl

# The container image (Containerfile): the static binary and busybox, nothing pulled.
image:
    tools/image

# The integration suite against the static binary.
test-static: static
    EXEC_SERVER_TEST_BIN=target/x86_64-unknown-linux-musl/ship/exec-server cargo test --test it

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

# Measures the binary we ship on Linux, the static one (`EXEC_SERVER_BIN=path
# just bench` for another); its `static` section sets the glibc build beside it.
bench: ship static
    EXEC_SERVER_BIN="${EXEC_SERVER_BIN:-target/x86_64-unknown-linux-musl/ship/exec-server}" cargo bench --bench throughput
