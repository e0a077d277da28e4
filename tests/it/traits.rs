//! One suite for each trait, run against the local and the remote implementation.

use std::path::Path;

use exec_server::protocol::*;
use exec_server::*;

use crate::binary::BIN;
use crate::support::{scratch, within};

async fn filesystem_suite(fs: impl FileSystem, dir: &Path) {
    let file = dir.join("sub/file.txt");
    fs.create_directory(&dir.join("sub"), true).await.unwrap();
    fs.write_file(&file, b"hello").await.unwrap();
    fs.append_file(&file, b" world").await.unwrap();
    assert_eq!(fs.read_file(&file).await.unwrap(), b"hello world");
    assert_eq!(fs.read_range(&file, 6, 100).await.unwrap(), b"world");
    let meta = fs.metadata(&file).await.unwrap();
    assert_eq!((meta.is_file, meta.size, meta.is_symlink), (true, 11, false));
    let entries = fs.read_directory(&dir.join("sub")).await.unwrap();
    let listed: Vec<_> = entries
        .iter()
        .map(|e| (e.file_name.as_str(), e.is_directory, e.is_file, e.file_name_base64.is_none()))
        .collect();
    assert_eq!(listed, [("file.txt", false, true, true)]);
    fs.copy(&dir.join("sub"), &dir.join("copy"), true).await.unwrap();
    fs.rename(&dir.join("copy/file.txt"), &dir.join("moved.txt")).await.unwrap();
    assert_eq!(fs.read_file(&dir.join("moved.txt")).await.unwrap(), b"hello world");
    fs.remove(&dir.join("sub"), true, false).await.unwrap();
    let missing = fs.read_file(&file).await.unwrap_err();
    assert!(missing.is_not_found(), "{missing}");
    assert_eq!(missing.rpc().unwrap().data.as_ref().unwrap()["path"], file.to_str().unwrap());
    let not_empty = fs.remove(dir, false, false).await.unwrap_err();
    assert_eq!(not_empty.io_kind(), Some("directoryNotEmpty"));
    fs.remove(&dir.join("nothing"), true, true).await.unwrap();
    let refused = fs.copy(dir, &dir.join("inside"), true).await.unwrap_err();
    assert_eq!(
        refused.rpc().unwrap().message,
        "fs/copy cannot copy a directory to itself or one of its descendants"
    );
}

async fn executor_suite(executor: impl Executor) {
    let mut p =
        executor.start(StartParams::new("a", ["sh", "-c", "echo out; exit 2"], "/")).await.unwrap();
    let (output, status) = within("a", p.output_to_end()).await.unwrap();
    assert_eq!((output, status.code), (b"out\n".to_vec(), 2));
    let mut cat = executor.start(StartParams::new("b", ["cat"], "/").with_stdin()).await.unwrap();
    cat.write(b"in").await.unwrap();
    cat.close_stdin().await.unwrap();
    assert_eq!(within("b", cat.output_to_end()).await.unwrap().0, b"in");
    let mut long = executor.start(StartParams::new("c", ["sleep", "30"], "/")).await.unwrap();
    long.terminate(None).await.unwrap();
    assert_eq!(within("c", long.wait()).await.unwrap().signal.as_deref(), Some("SIGKILL"));
    let error = executor.start(StartParams::new("d", ["/no/such/program"], "/")).await.unwrap_err();
    assert_eq!(error.rpc().unwrap().code, -32603);
}

#[tokio::test]
async fn local_filesystem() {
    filesystem_suite(LocalFileSystem, &scratch("traits-local-fs")).await;
}

#[tokio::test]
async fn remote_filesystem() {
    let launcher = Launcher::spawn(LaunchCommand::new(*BIN)).await.unwrap();
    filesystem_suite(
        RemoteFileSystem::new(launcher.client().clone()),
        &scratch("traits-remote-fs"),
    )
    .await;
}

#[tokio::test]
async fn local_executor() {
    executor_suite(LocalExecutor::new().await.unwrap()).await;
}

#[tokio::test]
async fn remote_executor() {
    let launcher = Launcher::spawn(LaunchCommand::new(*BIN)).await.unwrap();
    executor_suite(RemoteExecutor::new(launcher.client().clone())).await;
}

#[tokio::test]
async fn remote_filesystem_and_executor_over_websocket() {
    let launcher = Launcher::spawn_listening(LaunchCommand::new(*BIN), ClientOptions::default())
        .await
        .unwrap();
    let server = launcher.pid();
    filesystem_suite(RemoteFileSystem::new(launcher.client().clone()), &scratch("traits-ws-fs"))
        .await;
    executor_suite(RemoteExecutor::new(launcher.client().clone())).await;
    drop(launcher);
    crate::support::wait_dead(server).await;
}
