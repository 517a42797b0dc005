//! How large the ingest batches of a real host are, decoded and as sent, in each
//! `--wire-format` (protobuf + zstd, JSON + gzip), and what encoding one costs the agent: the
//! figures behind the server's `--max-decoded-bytes` and `--max-samples-per-batch` defaults
//! (docs/SECURITY.md, docs/BENCHMARKS.md).
//!
//! ```sh
//! cargo run --release -p fleetlens-agent --example batch-size
//! ```
//!
//! Batches are made the way the agent makes them ([`encode_batch`]), of the simulator's
//! samples (every GPU busy with one job: a process with its owner) for one 8-GPU host over 5 s
//! (the default `--flush-interval`) and 60 s, of the same host with 8 processes per GPU and a
//! 200-character command line each (a crowded host), and of the recorded H200 trace.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fleetlens_agent::pusher::encode_batch;
use fleetlens_agent::source::simulate::Simulator;
use fleetlens_agent::wire::WireFormat;
use fleetlens_core::{GpuProcess, Sample};

fn simulated(gpus: u32, seconds: i64) -> Vec<Sample> {
    let mut sim = Simulator::new(gpus, 1, Duration::from_secs(1), Some("gpu-node-01"));
    let start = 1_800_000_000_000;
    // A minute of warm-up first, so that every GPU has picked up a job.
    (0..60).for_each(|s| drop(sim.step(start - 60_000 + s * 1000)));
    (0..seconds).flat_map(|s| sim.step(start + s * 1000)).flat_map(|h| h.samples).collect()
}

fn crowded(mut samples: Vec<Sample>) -> Vec<Sample> {
    for s in &mut samples {
        let template = s.processes.as_ref().and_then(|p| p.first().cloned()).unwrap_or_default();
        s.processes = Some(
            (0..8)
                .map(|i| GpuProcess {
                    pid: 10_000 + i,
                    command: Some(format!("/opt/conda/envs/train/bin/python -m torch.distributed.run --nproc-per-node 8 train.py --config configs/llama-70b.yaml --rank {i} {}", "x".repeat(80))),
                    ..template.clone()
                })
                .collect(),
        );
    }
    samples
}

fn report(what: &str, samples: Vec<Sample>) {
    let n = samples.len();
    let labels = BTreeMap::from([("team".to_string(), "ml-platform".to_string())]);
    for format in WireFormat::ALL {
        let decoded = format
            .batch(fleetlens_api::IngestBatch {
                host: "gpu-node-01".into(),
                agent_version: Some(fleetlens_agent::pusher::AGENT_VERSION.into()),
                labels: labels.clone(),
                samples: samples.clone(),
                events: vec![],
            })
            .serialize();
        // The agent's whole encoding (conversion, serialisation, compression), best of a few.
        let runs = (200_000 / n.max(1)).clamp(3, 200);
        let mut best = Duration::MAX;
        let mut body = Vec::new();
        for _ in 0..runs {
            let copy = samples.clone();
            let t = Instant::now();
            body = encode_batch("gpu-node-01", &labels, copy, vec![], format);
            best = best.min(t.elapsed());
        }
        println!(
            "{what:<44} {:<8} {n:>5} samples  decoded {:>9} B ({:>5.0} B/sample)  sent {:>7} B ({:>5.1} B/sample)  encoded in {:>8.1} µs ({:.2} µs/sample)",
            format!("{format:?}").to_lowercase(),
            decoded.len(),
            decoded.len() as f64 / n as f64,
            body.len(),
            body.len() as f64 / n as f64,
            best.as_secs_f64() * 1e6,
            best.as_secs_f64() * 1e6 / n as f64,
        );
    }
}

fn main() {
    report("8 GPUs x 5 s (one default flush)", simulated(8, 5));
    report("8 GPUs x 60 s", simulated(8, 60));
    report("8 GPUs x 60 s, 8 processes/GPU, long cmds", crowded(simulated(8, 60)));
    report("agent --batch-max 5000 (8 GPUs x 625 s)", simulated(8, 625));
    report("--batch-max 5000, 8 procs/GPU, long cmds", crowded(simulated(8, 625)));
    let trace: Vec<Sample> = include_str!("../../tests/fixtures/nvml-h200-phases.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("fixture line"))
        .collect();
    report("recorded H200 trace (tests/fixtures)", trace);
}
