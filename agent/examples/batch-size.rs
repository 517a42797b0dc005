//! How large the ingest batches of a real host are, decoded (JSON) and as sent (gzip): the
//! figures behind the server's `--max-decoded-bytes` and `--max-samples-per-batch` defaults
//! (docs/SECURITY.md, docs/BENCHMARKS.md).
//!
//! ```sh
//! cargo run -p fleetlens-agent --example batch-size
//! ```
//!
//! Batches are made the way the agent makes them ([`encode_batch`]), of the simulator's
//! samples (every GPU busy with one job: a process with its owner) for one 8-GPU host over 5 s
//! (the default `--flush-interval`) and 60 s, of the same host with 8 processes per GPU and a
//! 200-character command line each (a crowded host), and of the recorded H200 trace.

use std::collections::BTreeMap;
use std::io::Read;
use std::time::Duration;

use fleetlens_agent::pusher::encode_batch;
use fleetlens_agent::source::simulate::Simulator;
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
    let gz = encode_batch("gpu-node-01", &labels, samples, vec![]);
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(&gz[..]).read_to_end(&mut json).expect("own gzip");
    println!(
        "{what:<44} {n:>5} samples  decoded {:>9} B ({:>5.0} B/sample)  gzip {:>7} B  ratio {:>4.1}x",
        json.len(),
        json.len() as f64 / n as f64,
        gz.len(),
        json.len() as f64 / gz.len() as f64
    );
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
