//! `replay:PATH`: a recorded JSONL trace (`tests/fixtures/README.md`), one sample per line.
//!
//! The whole trace is read and checked when the source opens, so a malformed line stops the
//! agent before anything is sent instead of half-way through a back-fill.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use fleetlens_core::Sample;
use serde::Deserialize;
use tokio::time::Instant;

use super::{GpuSource, HostSamples, SourceError, SourceOptions, now_ms};

/// One trace line, with the host it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceRecord {
    pub host: String,
    pub sample: Sample,
}

/// The fields of a line that are not part of [`Sample`].
#[derive(Deserialize)]
struct LineHost {
    #[serde(default)]
    host: Option<String>,
}

/// serde_json's message without its "at line 1 column N" (every JSONL record is on line 1 of
/// its own parse, which reads as a contradiction next to the file's line number).
fn json_error(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    match msg.strip_suffix(&suffix) {
        Some(m) => format!("{m} (column {})", e.column()),
        None => msg,
    }
}

/// Parses a JSONL trace. `host_override` replaces every line's `host` (and makes it optional).
pub fn parse_trace(text: &str, path: &Path, host_override: Option<&str>) -> Result<Vec<TraceRecord>, SourceError> {
    let malformed = |line: usize, message: String| SourceError::Malformed { path: path.to_path_buf(), line, message };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let sample: Sample = serde_json::from_str(line).map_err(|e| malformed(n, json_error(&e)))?;
        if sample.uuid.trim().is_empty() {
            return Err(malformed(n, "missing `uuid`".into()));
        }
        if sample.ts_ms <= 0 {
            return Err(malformed(n, format!("`ts_ms` must be positive Unix milliseconds, got {}", sample.ts_ms)));
        }
        let host = match host_override {
            Some(h) => h.to_string(),
            None => {
                let LineHost { host } =
                    serde_json::from_str(line).map_err(|e| malformed(n, format!("bad `host`: {}", json_error(&e))))?;
                match host {
                    Some(h) if !h.trim().is_empty() => h,
                    _ => return Err(malformed(n, "no `host` field; pass --host NAME".into())),
                }
            }
        };
        out.push(TraceRecord { host, sample });
    }
    if out.is_empty() {
        return Err(SourceError::Empty(path.to_path_buf()));
    }
    Ok(out)
}

/// Reads and parses a trace file.
pub fn read_trace(path: &Path, host_override: Option<&str>) -> Result<Vec<TraceRecord>, SourceError> {
    let text = std::fs::read_to_string(path).map_err(|source| SourceError::Io { path: path.to_path_buf(), source })?;
    parse_trace(&text, path, host_override)
}

/// Emits a trace's records grouped by timestamp, paced by the recorded gaps divided by the
/// speed (or at once without a speed).
pub struct ReplaySource {
    path: PathBuf,
    records: Vec<TraceRecord>,
    pos: usize,
    speed: Option<f64>,
    /// Wall-clock instant that the first record maps to; set on the first `next()`.
    start: Option<Instant>,
    first_ts: i64,
}

impl ReplaySource {
    pub fn open(path: &Path, opts: &SourceOptions) -> Result<Self, SourceError> {
        let mut records = read_trace(path, opts.host.as_deref())?;
        if opts.rebase_ts {
            // Keep the recorded gaps, move the whole trace so its earliest sample is now.
            let min_ts = records.iter().map(|r| r.sample.ts_ms).min().unwrap_or(0);
            let shift = now_ms() - min_ts;
            for r in &mut records {
                r.sample.ts_ms += shift;
            }
        }
        // Pacing anchor: emission starts with the first line, whatever its timestamp.
        let first_ts = records.first().map(|r| r.sample.ts_ms).unwrap_or(0);
        Ok(Self { path: path.to_path_buf(), records, pos: 0, speed: opts.speed, start: None, first_ts })
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Takes the records sharing the next timestamp, grouped by host in trace order.
    fn take_group(&mut self) -> Vec<HostSamples> {
        let ts = self.records[self.pos].sample.ts_ms;
        let mut out: Vec<HostSamples> = Vec::new();
        while let Some(r) = self.records.get(self.pos).filter(|r| r.sample.ts_ms == ts) {
            match out.iter_mut().find(|h| h.host == r.host) {
                Some(h) => h.samples.push(r.sample.clone()),
                None => out.push(HostSamples::new(r.host.clone(), vec![r.sample.clone()])),
            }
            self.pos += 1;
        }
        out
    }
}

#[async_trait]
impl GpuSource for ReplaySource {
    fn describe(&self) -> String {
        let pace = match self.speed {
            Some(x) => format!("{x}x"),
            None => "unpaced".into(),
        };
        format!("replay:{} ({} samples, {pace})", self.path.display(), self.records.len())
    }

    fn is_live(&self) -> bool {
        false
    }

    async fn next(&mut self) -> Result<Option<Vec<HostSamples>>, SourceError> {
        let Some(rec) = self.records.get(self.pos) else {
            return Ok(None);
        };
        if let Some(speed) = self.speed {
            // Pace against a fixed anchor rather than sleeping gap by gap, so time spent
            // elsewhere does not accumulate as drift. An out-of-order line is sent at once.
            let start = *self.start.get_or_insert_with(Instant::now);
            let offset_ms = (rec.sample.ts_ms - self.first_ts).max(0) as f64 / speed;
            tokio::time::sleep_until(start + Duration::from_secs_f64(offset_ms / 1000.0)).await;
        }
        Ok(Some(self.take_group()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/nvml-h200-phases.jsonl")
    }

    fn opts(speed: Option<f64>) -> SourceOptions {
        SourceOptions { interval: Duration::from_secs(1), host: None, seed: 1, speed, ..Default::default() }
    }

    #[test]
    fn reads_the_h200_fixture() {
        let recs = read_trace(&fixture(), None).unwrap();
        assert_eq!(recs.len(), 84);
        let first = &recs[0];
        assert_eq!(first.host, "gpu-node-01");
        assert_eq!(first.sample.ts_ms, 1795311343641);
        assert_eq!(first.sample.uuid, "GPU-b8c24ac0-038a-26bb-9696-7e629bc4f276");
        assert_eq!(first.sample.name.as_deref(), Some("NVIDIA H200"));
        assert_eq!(first.sample.gpu_index, Some(0));
        assert_eq!(first.sample.gpu_util_pct, Some(0.0));
        assert_eq!(first.sample.power_w, Some(82.136));
        assert_eq!(first.sample.throttle_reasons, Some(1));
        assert_eq!(first.sample.processes, Some(vec![]));
        // Not measured on this GPU: absent, never 0.
        assert!(recs.iter().all(|r| r.sample.fp64_active_pct.is_none()));
        assert!(recs.iter().all(|r| r.sample.sm_active_pct.is_some()));
        // Timestamps strictly increase: the trace is one GPU sampled every second.
        assert!(recs.windows(2).all(|w| w[0].sample.ts_ms < w[1].sample.ts_ms));
        let held = recs.iter().find(|r| r.sample.is_allocated()).unwrap();
        let p = &held.sample.processes.as_ref().unwrap()[0];
        assert_eq!(p.pid, 425);
        assert_eq!(p.sm_pct, None);
    }

    #[test]
    fn values_round_trip_through_json() {
        let text = std::fs::read_to_string(fixture()).unwrap();
        let recs = parse_trace(&text, &fixture(), None).unwrap();
        for (line, rec) in text.lines().zip(&recs) {
            let original: serde_json::Value = serde_json::from_str(line).unwrap();
            let again: serde_json::Value = serde_json::to_value(&rec.sample).unwrap();
            for (k, v) in again.as_object().unwrap() {
                let o = &original[k];
                match (o.as_f64(), v.as_f64()) {
                    (Some(a), Some(b)) => assert_eq!(a, b, "field {k}"),
                    _ => assert_eq!(o, v, "field {k}"),
                }
            }
            let back: Sample = serde_json::from_value(again).unwrap();
            assert_eq!(&back, &rec.sample);
        }
    }

    #[test]
    fn malformed_lines_name_the_line() {
        let p = Path::new("t.jsonl");
        let good = r#"{"ts_ms":1,"host":"h","uuid":"GPU-1"}"#;
        let err = parse_trace(&format!("{good}\n\n{{oops\n"), p, None).unwrap_err();
        assert!(err.to_string().contains("line 3"), "{err}");
        let err = parse_trace(&format!("{good}\n{{\"ts_ms\":2,\"uuid\":\"GPU-1\"}}\n"), p, None).unwrap_err();
        assert!(err.to_string().contains("line 2") && err.to_string().contains("--host"), "{err}");
        let err = parse_trace(r#"{"ts_ms":1,"host":"h"}"#, p, None).unwrap_err();
        assert!(err.to_string().contains("line 1") && err.to_string().contains("uuid"), "{err}");
        let err = parse_trace(r#"{"ts_ms":"x","host":"h","uuid":"u"}"#, p, None).unwrap_err();
        assert!(err.to_string().contains("line 1"), "{err}");
        assert!(matches!(parse_trace("\n\n", p, None), Err(SourceError::Empty(_))));
        // --host makes the field optional and wins over it.
        let recs = parse_trace(r#"{"ts_ms":2,"uuid":"GPU-1"}"#, p, Some("x")).unwrap();
        assert_eq!(recs[0].host, "x");
        let recs = parse_trace(good, p, Some("x")).unwrap();
        assert_eq!(recs[0].host, "x");
    }

    #[test]
    fn unreadable_trace_is_an_io_error() {
        let err = read_trace(Path::new("/nonexistent/trace.jsonl"), None).unwrap_err();
        assert!(matches!(err, SourceError::Io { .. }));
        assert!(err.to_string().contains("/nonexistent/trace.jsonl"));
    }

    #[tokio::test]
    async fn emits_everything_unpaced() {
        let mut src = ReplaySource::open(&fixture(), &opts(None)).unwrap();
        let mut n = 0;
        let mut last = 0;
        while let Some(groups) = src.next().await.unwrap() {
            for g in groups {
                assert_eq!(g.host, "gpu-node-01");
                for s in g.samples {
                    assert!(s.ts_ms > last);
                    last = s.ts_ms;
                    n += 1;
                }
            }
        }
        assert_eq!(n, 84);
    }

    #[tokio::test(start_paused = true)]
    async fn paces_by_recorded_gaps_over_speed() {
        let mut src = ReplaySource::open(&fixture(), &opts(Some(10.0))).unwrap();
        let t0 = Instant::now();
        let first = src.next().await.unwrap().unwrap()[0].samples[0].ts_ms;
        let mut last = first;
        while let Some(g) = src.next().await.unwrap() {
            last = g[0].samples[0].ts_ms;
        }
        // Virtual time: the whole trace takes (last - first) / 10 ms.
        let want = Duration::from_millis(((last - first) / 10) as u64);
        let took = t0.elapsed();
        assert!(took >= want && took < want + Duration::from_millis(5), "{took:?} vs {want:?}");
    }

    #[test]
    fn rebase_moves_the_trace_to_now() {
        let o = SourceOptions { rebase_ts: true, ..opts(None) };
        let src = ReplaySource::open(&fixture(), &o).unwrap();
        let recs = &src.records;
        assert!((recs[0].sample.ts_ms - now_ms()).abs() < 60_000);
        let orig = read_trace(&fixture(), None).unwrap();
        assert_eq!(recs[83].sample.ts_ms - recs[0].sample.ts_ms, orig[83].sample.ts_ms - orig[0].sample.ts_ms);
    }
}
