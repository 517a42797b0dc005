//! Pod allocations from the kubelet: a stand-in kubelet — a real tonic gRPC server serving the
//! PodResources v1 API (generated from the same proto) on a unix socket — answers the agent's
//! `List`; the agent maps device ids to GPUs and sends the allocations with every sample.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{API_KEY, ServerState};
use fleetlens_agent::kubelet::{WithKubelet, list_allocations};
use fleetlens_agent::source::replay::ReplaySource;
use fleetlens_agent::source::{GpuSource, SourceOptions};
use fleetlens_tests::kubelet::{StandInKubelet, pod};

const GPU_A: &str = "GPU-b8c24ac0-038a-26bb-9696-7e629bc4f276";
const GPU_B: &str = "GPU-8f844320-5b48-b691-e33f-8e42ba0c19f3";

/// A two-GPU trace of `instants` seconds, nobody on either GPU.
fn trace(dir: &Path, instants: i64) -> PathBuf {
    let path = dir.join("trace.jsonl");
    let mut text = String::new();
    for i in 0..instants {
        for (index, uuid) in [GPU_A, GPU_B].iter().enumerate() {
            text.push_str(&format!(
                "{{\"ts_ms\":{},\"host\":\"gpu-node-01\",\"uuid\":\"{uuid}\",\"gpu_index\":{index},\"gpu_util_pct\":0,\"processes\":[]}}\n",
                1_795_311_343_000 + i * 1000
            ));
        }
    }
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test]
async fn lists_gpu_allocations_over_the_socket() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let mut kubelet = StandInKubelet::serve(&socket);
    kubelet.set_pods(vec![
        pod("ml", "nb-alice", "notebook", "nvidia.com/gpu", &[GPU_A]),
        pod("cv", "serve", "triton", "nvidia.com/gpu.shared", &[&format!("{GPU_B}::0"), &format!("{GPU_B}::3")]),
        pod("cv", "nic", "n", "example.com/nic", &["eth1"]),
    ]);
    let table = list_allocations(&socket).await.unwrap();
    assert_eq!(table.len(), 2);
    let sample = |uuid: &str| fleetlens_core::Sample { uuid: uuid.into(), ..Default::default() };
    let a = table.for_sample(&sample(GPU_A), true);
    assert_eq!(a.len(), 1);
    assert_eq!((a[0].namespace.as_str(), a[0].pod.as_str(), a[0].container.as_str()), ("ml", "nb-alice", "notebook"));
    assert_eq!(a[0].device_id, GPU_A);
    let b = table.for_sample(&sample(GPU_B), true);
    assert_eq!(b.len(), 2, "both time-sliced replicas: {b:?}");
    assert!(b.iter().all(|x| x.pod == "serve" && x.resource == "nvidia.com/gpu.shared"));
    kubelet.stop().await;

    // Nobody on the socket any more: a clear error, not a hang.
    let err = list_allocations(&socket).await.unwrap_err().to_string();
    assert!(err.contains("kubelet"), "{err}");
}

#[tokio::test]
async fn samples_carry_allocations_and_follow_the_kubelet() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let mut kubelet = StandInKubelet::serve(&socket);
    kubelet.allocate("ml", "nb-alice", "notebook", "nvidia.com/gpu", &[GPU_A]);
    let replay =
        ReplaySource::open(&trace(dir.path(), 10), &SourceOptions { speed: None, ..Default::default() }).unwrap();
    let refresh = Duration::from_millis(100);
    let mut src = WithKubelet::new(Box::new(replay), socket.clone(), refresh);
    let held_by = |hosts: &[fleetlens_agent::source::HostSamples], uuid: &str| -> Vec<String> {
        let s = hosts[0].samples.iter().find(|s| s.uuid == uuid).unwrap();
        s.allocations.iter().map(|a| format!("{}/{}", a.namespace, a.pod)).collect()
    };
    let first = src.next().await.unwrap().unwrap();
    assert_eq!(held_by(&first, GPU_A), ["ml/nb-alice"]);
    assert!(held_by(&first, GPU_B).is_empty());
    assert_eq!(kubelet.lists(), 1);
    // Within the refresh period the table is reused.
    src.next().await.unwrap().unwrap();
    assert_eq!(kubelet.lists(), 1);

    // The pod leaves, another takes GPU B: seen after the next refresh.
    kubelet.set_pods(vec![pod("cv", "train", "t", "nvidia.com/gpu", &[GPU_B])]);
    tokio::time::sleep(refresh * 2).await;
    let later = src.next().await.unwrap().unwrap();
    assert!(held_by(&later, GPU_A).is_empty());
    assert_eq!(held_by(&later, GPU_B), ["cv/train"]);

    // The kubelet goes away (socket left behind): the last table is kept for three refresh
    // periods, then dropped rather than give GPUs to pods that may have left.
    kubelet.stop().await;
    tokio::time::sleep(refresh + refresh / 2).await;
    assert_eq!(held_by(&src.next().await.unwrap().unwrap(), GPU_B), ["cv/train"]);
    tokio::time::sleep(refresh * 4).await;
    let gone = src.next().await.unwrap().unwrap();
    assert!(held_by(&gone, GPU_B).is_empty(), "stale allocations dropped");
}

#[tokio::test]
async fn no_socket_no_allocations() {
    let dir = tempfile::tempdir().unwrap();
    let replay =
        ReplaySource::open(&trace(dir.path(), 2), &SourceOptions { speed: None, ..Default::default() }).unwrap();
    let mut src = WithKubelet::new(Box::new(replay), dir.path().join("absent.sock"), Duration::from_millis(10));
    let hosts = src.next().await.unwrap().unwrap();
    assert_eq!(hosts[0].samples.len(), 2);
    assert!(hosts[0].samples.iter().all(|s| s.allocations.is_empty()));
}

/// The binary, end to end: `--kubelet-socket` reaches the stand-in kubelet, and every sample of
/// the allocated GPU arrives at the server with its pod.
#[tokio::test]
async fn agent_binary_sends_allocations() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let kubelet = StandInKubelet::serve(&socket);
    kubelet.allocate("ml", "nb-alice", "notebook", "nvidia.com/gpu", &[GPU_A]);
    let server = common::start(ServerState::new([])).await;
    let trace = trace(dir.path(), 5);
    let mut agent = common::agent_command(["--server", &server.url, "--api-key", API_KEY, "--once", "--source"]);
    agent.arg(format!("replay:{}", trace.display()));
    agent.arg("--spool-dir").arg(dir.path().join("spool")).arg("--kubelet-socket").arg(&socket);
    let out = common::finish(agent, Duration::from_secs(30)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("reading GPU allocations from the kubelet"), "{stderr}");
    let batches = server.state.accepted.lock().unwrap().clone();
    let samples: Vec<_> = batches.iter().flat_map(|b| b.samples.iter()).collect();
    assert_eq!(samples.len(), 10);
    for s in samples {
        if s.uuid == GPU_A {
            assert_eq!(s.allocations.len(), 1, "{s:?}");
            assert_eq!(s.allocations[0].pod, "nb-alice");
            assert_eq!(s.allocations[0].container, "notebook");
        } else {
            assert!(s.allocations.is_empty());
        }
    }
}
