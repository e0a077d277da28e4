//! Rows beside another server of the same protocol, measured in the same
//! run: `EXEC_SERVER_PEER="codex exec-server --listen stdio"` (upstream's,
//! from the npm package `@openai/codex@0.169.0-linux-x64`, whose
//! `CODEX_HOME` must lie outside `TMPDIR`). Our build is the row's value,
//! the peer its baseline; the peer is driven in today's dialect.

use std::time::Duration;

use exec_server::{Client, ClientOptions, Dialect, LaunchCommand, Launcher};

use super::{
    handshakes, median, median_of, metadata_round_trips, micros, peak_rss_mib, server_binary,
    server_spawns_in_turn, Row, HANDSHAKES, ROUND_TRIPS, SPAWNS,
};

/// The peer's command line, when `EXEC_SERVER_PEER` names one.
fn peer() -> Option<Vec<String>> {
    let words: Vec<String> =
        std::env::var("EXEC_SERVER_PEER").ok()?.split_whitespace().map(str::to_owned).collect();
    (!words.is_empty()).then_some(words)
}

async fn launch(argv: &[String], dialect: Dialect) -> Launcher {
    let mut command = LaunchCommand::new(&argv[0]);
    command.args = argv[1..].to_vec();
    let options = ClientOptions { dialect, ..ClientOptions::default() };
    Launcher::spawn_with(command, options).await.unwrap()
}

pub(super) async fn rows(rows: &mut Vec<Row>) {
    let Some(peer) = peer() else {
        println!("(peer rows left out: EXEC_SERVER_PEER is unset)");
        return;
    };
    let ours = vec![server_binary()];
    let (ours_start, peer_start) = (
        median_of(|| handshakes(ours.clone(), HANDSHAKES)).await,
        median_of(|| handshakes(peer.clone(), HANDSHAKES)).await,
    );
    push(rows, "vs peer: spawn -> initialize reply (us)", ours_start, peer_start, HANDSHAKES);
    let ours_server = launch(&ours, Dialect::V0).await;
    let peer_server = launch(&peer, Dialect::Today).await;
    let (ours_client, peer_client) = (ours_server.client().clone(), peer_server.client().clone());
    let trips = |client: Client| {
        median(move || {
            let client = client.clone();
            async move { metadata_round_trips(&client).await }
        })
    };
    let (ours_trip, peer_trip) =
        (trips(ours_client.clone()).await, trips(peer_client.clone()).await);
    push(rows, "vs peer: fs/getMetadata round trip (us)", ours_trip, peer_trip, ROUND_TRIPS);
    // The stream is left out: upstream keeps little of a process's output,
    // and the chunks our Client's handle drops when its queue is full (it
    // catches up with process/read) are gone there; a 256 MiB stream lost
    // 0.05-1 MiB. Starts are measured.
    let mut n = 0;
    let mut spawns = |client: Client, tag: &'static str| {
        n += 1;
        let prefix = format!("peer-{tag}-{n}");
        async move { server_spawns_in_turn(&client, &prefix, None, None).await }
    };
    let ours_spawn = median(|| spawns(ours_client.clone(), "ours")).await;
    let peer_spawn = median(|| spawns(peer_client.clone(), "peer")).await;
    push(
        rows,
        "vs peer: process/start of true -> exited (us each)",
        ours_spawn,
        peer_spawn,
        SPAWNS,
    );
    rows.push(Row {
        what: "vs peer: server peak RSS after the round trips (MiB)",
        server: peak_rss_mib(ours_server.pid()),
        baseline: peak_rss_mib(peer_server.pid()),
        baseline_what: "the peer",
        unit: "MiB",
        higher_is_better: false,
    });
}

fn push(rows: &mut Vec<Row>, what: &'static str, ours: Duration, peer: Duration, count: u32) {
    rows.push(Row {
        what,
        server: micros(ours, count),
        baseline: micros(peer, count),
        baseline_what: "the peer",
        unit: "us",
        higher_is_better: false,
    });
}
