//! `--source dcgm:URL` against recorded dcgm-exporter 3.3 expositions: the field mapping, a
//! real HTTP scrape of a server on 127.0.0.1:0, and the binary end to end.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use axum::http::StatusCode;
use common::{API_KEY, ServerState};
use fleetlens_agent::source::dcgm::{DcgmSource, map_exposition};
use fleetlens_agent::source::{GpuSource, SourceOptions};
use fleetlens_core::Sample;
use tokio::net::TcpListener;

const GPU0: &str = "GPU-5d1c2b7e-8a3f-4c61-9e0d-2f7a6b1c9d3e";
const GPU1: &str = "GPU-a0e4f3d2-61b7-4f58-8c29-7d3e5b1a0c64";
const MIB: i64 = 1 << 20;

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-6)
}

fn check_h100_pair(samples: &[Sample]) {
    assert_eq!(samples.len(), 2);
    let (s0, s1) = (&samples[0], &samples[1]);
    assert_eq!((s0.uuid.as_str(), s0.gpu_index), (GPU0, Some(0)));
    assert_eq!((s1.uuid.as_str(), s1.gpu_index), (GPU1, Some(1)));
    assert_eq!(s0.name.as_deref(), Some("NVIDIA H100 80GB HBM3"));

    // The busy GPU: ratios 0–1 become percentages.
    assert!(close(s0.sm_active_pct, 95.3125), "{:?}", s0.sm_active_pct);
    assert!(close(s0.sm_occupancy_pct, 24.0967));
    assert!(close(s0.tensor_active_pct, 71.2305));
    assert!(close(s0.dram_active_pct, 30.5176));
    assert!(close(s0.gr_engine_active_pct, 99.1234));
    assert!(close(s0.fp32_active_pct, 5.2246));
    assert!(close(s0.fp16_active_pct, 0.0031));
    assert!(close(s0.fp64_active_pct, 0.0));
    // DCGM_FI_DEV_*_UTIL are percentages already.
    assert_eq!(s0.gpu_util_pct, Some(100.0));
    assert_eq!(s0.mem_util_pct, Some(38.0));
    // MiB → bytes; total = used + free + reserved.
    assert_eq!(s0.mem_used_bytes, Some(77662 * MIB));
    assert_eq!(s0.mem_total_bytes, Some((77662 + 3411 + 486) * MIB));
    assert_eq!(s0.power_w, Some(612.347));
    assert_eq!(s0.power_limit_w, Some(700.0));
    // mJ → J.
    assert!(close(s0.energy_j, 81_234_567.891));
    assert_eq!(s0.temp_c, Some(58.0));
    assert_eq!(s0.sm_clock_mhz, Some(1980.0));
    assert_eq!(s0.throttle_reasons, Some(4));
    // Bytes/s → MiB/s.
    assert!(close(s0.pcie_tx_mib_s, 175.0));
    assert!(close(s0.pcie_rx_mib_s, 1000.0));
    assert!(close(s0.nvlink_tx_mib_s, 50_000.0));
    assert!(close(s0.nvlink_rx_mib_s, 49_000.0));
    // Not exported by dcgm-exporter: absent, never 0.
    assert_eq!(s0.int_active_pct, None);
    // dcgm-exporter knows the pod holding the GPU, not its processes: one process, pid 0,
    // carries the pod as its owner; the GPU without a pod has no process list (unknown).
    let procs = s0.processes.as_ref().expect("the pod's GPU lists its owner");
    let owner = procs[0].owner.as_ref().unwrap();
    assert_eq!((procs.len(), procs[0].pid), (1, 0));
    assert_eq!(owner.pod_name.as_deref(), Some("llama3-ft-7f9c6d5b8-x2kqp"));
    assert_eq!(owner.namespace.as_deref(), Some("ml-research"));
    assert_eq!(owner.labels["container"], "trainer");
    assert_eq!(s1.processes, None);

    // The idle GPU reads real zeros (measured), not absences.
    assert_eq!(s1.sm_active_pct, Some(0.0));
    assert_eq!(s1.gpu_util_pct, Some(0.0));
    assert_eq!(s1.mem_used_bytes, Some(0));
    assert!(close(s1.dram_active_pct, 0.0004));
    assert_eq!(s1.throttle_reasons, Some(1));
}

#[test]
fn maps_a_dcgm_exporter_exposition() {
    let m = map_exposition(&fixture("dcgm-exporter-3.3-h100x2.prom"), 1_795_311_343_641, None, "fallback").unwrap();
    assert_eq!(m.hosts.len(), 1);
    let h = &m.hosts[0];
    assert_eq!(h.host, "gpu-node-07", "the Hostname label names the host");
    assert!(h.samples.iter().all(|s| s.ts_ms == 1_795_311_343_641));
    check_h100_pair(&h.samples);
    // Kubernetes and identity labels travel as batch labels; a GPU without a pod has none.
    let l = &h.labels;
    assert_eq!(l[&format!("gpu.{GPU0}.pod")], "llama3-ft-7f9c6d5b8-x2kqp");
    assert_eq!(l[&format!("gpu.{GPU0}.namespace")], "ml-research");
    assert_eq!(l[&format!("gpu.{GPU0}.container")], "trainer");
    assert_eq!(l[&format!("gpu.{GPU0}.pci_bus_id")], "00000000:18:00.0");
    assert_eq!(l[&format!("gpu.{GPU1}.driver_version")], "550.90.07");
    assert!(!l.contains_key(&format!("gpu.{GPU1}.pod")));
    // The last XID error is surfaced (and logged by the source).
    assert_eq!(m.xids, vec![(GPU1.to_string(), 79)]);
    // Every sample passes the server's validation.
    for (i, s) in h.samples.iter().enumerate() {
        fleetlens_core::validate::validate_sample(i, s, 1_795_311_343_641).unwrap();
    }
    // --host wins over the label.
    let m = map_exposition(&fixture("dcgm-exporter-3.3-h100x2.prom"), 1, Some("mine"), "fallback").unwrap();
    assert_eq!(m.hosts[0].host, "mine");
}

#[test]
fn mig_instances_are_gpus_of_their_own() {
    let m = map_exposition(&fixture("dcgm-exporter-3.3-a100-mig.prom"), 5, None, "fallback").unwrap();
    let h = &m.hosts[0];
    assert_eq!(h.host, "a100-node-02");
    let parent = "GPU-7c3e91a4-2b5d-4f0e-a8c6-1d9b3e5f7a20";
    let uuids: Vec<&str> = h.samples.iter().map(|s| s.uuid.as_str()).collect();
    assert_eq!(uuids.len(), 3);
    assert!(uuids.contains(&parent));
    let gi2 = h.samples.iter().find(|s| s.uuid == format!("{parent}/gi2")).unwrap();
    let gi13 = h.samples.iter().find(|s| s.uuid == format!("{parent}/gi13")).unwrap();
    let whole = h.samples.iter().find(|s| s.uuid == parent).unwrap();
    assert_eq!(gi2.name.as_deref(), Some("NVIDIA A100-SXM4-40GB MIG 3g.20gb"));
    assert!(close(gi2.sm_active_pct, 41.25));
    assert!(close(gi2.tensor_active_pct, 20.1));
    assert_eq!(gi2.mem_used_bytes, Some(18736 * MIB));
    assert_eq!(gi2.mem_total_bytes, Some((18736 + 1200) * MIB));
    assert_eq!(gi13.sm_active_pct, Some(0.0));
    // Whole-GPU readings stay on the parent, once.
    assert_eq!(whole.power_w, Some(187.25));
    assert_eq!(gi2.power_w, None);
    assert_eq!(whole.sm_active_pct, None);
    assert_eq!(h.labels[&format!("gpu.{parent}/gi2.mig_parent")], parent);
    assert_eq!(h.labels[&format!("gpu.{parent}/gi2.mig_profile")], "3g.20gb");
    assert_eq!(h.labels[&format!("gpu.{parent}/gi2.pod")], "triton-0");
    assert!(!h.labels.contains_key(&format!("gpu.{parent}/gi13.pod")));
}

#[test]
fn odd_expositions_do_not_break_the_mapping() {
    // NaN values, unknown metrics, comments, a label value with a comma, no Hostname.
    let text = "# a comment\n\
                DCGM_FI_PROF_SM_ACTIVE{gpu=\"0\",UUID=\"GPU-x\",modelName=\"A, B\"} NaN\n\
                DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-x\"} 101\n\
                DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-x\"} 10\n\
                process_open_fds 12\n";
    let m = map_exposition(text, 9, None, "fallback").unwrap();
    let s = &m.hosts[0].samples[0];
    assert_eq!(m.hosts[0].host, "fallback");
    assert_eq!(s.sm_active_pct, None, "NaN is not a reading");
    assert_eq!(s.gpu_util_pct, Some(100.0), "clamped into 0–100");
    assert_eq!(s.mem_used_bytes, Some(10 * MIB));
    assert_eq!(s.mem_total_bytes, None, "no FB_FREE: total unknown");
}

/// Serves `body` at /metrics after answering `fail_first` requests with 503.
async fn exporter(body: String, fail_first: usize) -> String {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/metrics", listener.local_addr().unwrap());
    let n = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let body = body.clone();
            let n = n.clone();
            async move {
                if n.fetch_add(1, Ordering::SeqCst) < fail_first {
                    (StatusCode::SERVICE_UNAVAILABLE, String::new())
                } else {
                    (StatusCode::OK, body)
                }
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

#[tokio::test]
async fn scrapes_a_real_http_endpoint() {
    let url = exporter(fixture("dcgm-exporter-3.3-h100x2.prom"), 1).await;
    let opts = SourceOptions { interval: Duration::from_millis(50), ..Default::default() };
    let mut src = DcgmSource::open(&url, &opts).unwrap();
    assert!(src.is_live());
    assert!(src.describe().starts_with("dcgm:http://127.0.0.1:"));
    // The exporter answers 503 first: no samples (the GPUs read as offline), no error.
    let first = src.next().await.unwrap().unwrap();
    assert!(first.is_empty());
    let before = fleetlens_agent::source::now_ms();
    let hosts = src.next().await.unwrap().unwrap();
    assert_eq!(hosts.len(), 1);
    assert_eq!(hosts[0].host, "gpu-node-07");
    check_h100_pair(&hosts[0].samples);
    assert!(hosts[0].samples.iter().all(|s| s.ts_ms >= before - 1000 && s.ts_ms <= before + 5000));

    // Nobody listening: also no samples and no error.
    let gone = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = format!("http://{}/metrics", gone.local_addr().unwrap());
    drop(gone);
    let mut src = DcgmSource::open(&dead, &opts).unwrap();
    assert!(src.next().await.unwrap().unwrap().is_empty());
}

#[tokio::test]
async fn agent_binary_ships_dcgm_samples() {
    let url = exporter(fixture("dcgm-exporter-3.3-h100x2.prom"), 0).await;
    let server = common::start(ServerState::new([])).await;
    let spool = tempfile::tempdir().unwrap();
    let source = format!("dcgm:{url}");
    let spool_dir = spool.path().to_str().unwrap();
    let agent = common::agent_command([
        "--server",
        &server.url,
        "--api-key",
        API_KEY,
        "--source",
        &source,
        "--once",
        "--spool-dir",
        spool_dir,
        "--label",
        "team=ml",
    ]);
    let out = common::finish(agent, Duration::from_secs(20)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("XID error reported by DCGM"), "{stderr}");
    let batches = server.state.accepted.lock().unwrap().clone();
    assert_eq!(batches.len(), 1);
    let b = &batches[0];
    assert_eq!(b.host, "gpu-node-07");
    assert_eq!(b.labels["team"], "ml");
    assert_eq!(b.labels[&format!("gpu.{GPU0}.pod")], "llama3-ft-7f9c6d5b8-x2kqp");
    check_h100_pair(&b.samples);
}
