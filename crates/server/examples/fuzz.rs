//! Stable-toolchain fuzzing of the parsers that take untrusted input (issue 8), run by
//! `scripts/fuzz.sh`: the ingest decoder (`routes::ingest::decode` + `check`: gzip, JSON, the
//! whole-batch validation), the same for protobuf bodies (zstd, the limit scan, prost, the
//! conversion) and the alert-rule condition parser (`rules::Condition::parse`).
//!
//! cargo-fuzz/libFuzzer needs nightly-only compiler flags (sanitizer coverage), so this is a
//! self-contained mutation fuzzer instead: seeds → random byte and token mutations, splices,
//! truncations and gzip wrapping → the target, with a panic hook; an input whose outcome class
//! is new (a different error code, path or message shape) joins the corpus, which steers the
//! mutations toward new parser paths without compiler instrumentation. A finding is a panic or
//! a broken property, saved under the findings directory.
//!
//! Properties checked on every input:
//! - ingest, ingest-protobuf: never panics; a rejection is a 4xx (never 5xx); an accepted batch
//!   re-encodes (to JSON, to protobuf) into a body that decodes and validates again with the
//!   same samples.
//! - condition: never panics; an error points inside the text (column ≤ length + 1); a parsed
//!   condition evaluates without panicking on a full sample, an empty one and an offline GPU;
//!   parsing is deterministic.
//!
//! `cargo run --release -p fleetlens-server --example fuzz -- TARGET SECONDS [SEED] [FINDINGS_DIR]`
//! with TARGET `ingest`, `ingest-protobuf` or `condition`. Prints one summary line: `target=… execs=… …`.

use std::collections::HashSet;
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use axum::http::header::{CONTENT_ENCODING, CONTENT_TYPE};
use axum::response::IntoResponse;
use fleetlens_api::ingest_protobuf as pb;
use fleetlens_core::rules::{Condition, DEFAULT_RULES};
use fleetlens_server::ingest_check::check;
use fleetlens_server::routes::ingest::{DecodeLimits, decode};

// The probes the libFuzzer target `condition` (fuzz/) evaluates a parsed condition on, too.
#[path = "../../../fuzz/common/condition_probes.rs"]
mod condition_probes;

/// xorshift64*: deterministic per seed, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { (self.next() % n as u64) as usize }
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

const INGEST_TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "null",
    "true",
    "false",
    "0",
    "-0",
    "-1",
    "1e999",
    "-1e999",
    "1e308",
    "1.7976931348623157e308",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "18446744073709551616",
    "4294967296",
    "0.000000001",
    "1E+2",
    "NaN",
    "Infinity",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "\"\\uDFFF\"",
    "\"é\"",
    "\"🚀\"",
    "\"' OR 1=1 --\"",
    "\"ts_ms\":",
    "\"uuid\":",
    "\"host\":",
    "\"samples\":",
    "\"labels\":",
    "\"processes\":",
    "\"gpu_util_pct\":",
    "\"mem_used_bytes\":",
    "\"power_w\":",
    "\"gpu_index\":",
    "\"throttle_reasons\":",
    "\"owner\":",
    "\"pid\":",
    "[[[[[[[[",
    "]]]]]]]]",
    "{\"a\":{\"a\":{\"a\":",
    "\\",
    "\u{0}",
    "\u{ff}",
];

const CONDITION_TOKENS: &[&str] = &[
    "gpu_util_pct",
    "sm_active_pct",
    "state",
    "stalled",
    "idle_held",
    "offline",
    "host",
    "team",
    "gpu_uuid",
    "mem_used_bytes",
    "efficiency",
    "thermal_throttle",
    "xid_errors",
    "duration_in_state_s",
    "power_pct_of_limit",
    "&&",
    "||",
    "and",
    "or",
    "not",
    "!",
    "==",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "+",
    "-",
    "*",
    "/",
    "(",
    ")",
    "0",
    "1e309",
    "-0",
    "1_000",
    "0.5",
    "1e",
    "1e+",
    "_",
    "\"",
    "'",
    "\"node-*\"",
    "'ml'",
    "true",
    "false",
    " ",
    "\t",
    "\n",
    "é",
    "🚀",
    "\u{0}",
    "\u{202e}",
    "((((((((",
    "))))))))",
    "1/0",
    "--1",
    "!!!!",
];

/// An outcome class: what the target did, coarsely (new classes grow the corpus).
type Class = String;

struct Fuzzer {
    rng: Rng,
    corpus: Vec<Vec<u8>>,
    classes: HashSet<Class>,
    execs: u64,
    findings: Vec<(String, Vec<u8>)>,
    dir: PathBuf,
    target: &'static str,
    seeds: usize,
}

impl Fuzzer {
    fn mutate(&mut self, tokens: &[&str]) -> Vec<u8> {
        let mut data = self.corpus[self.rng.below(self.corpus.len())].clone();
        let rounds = 1 + self.rng.below(6);
        for _ in 0..rounds {
            let len = data.len();
            match self.rng.below(9) {
                0 if len > 0 => {
                    let i = self.rng.below(len);
                    data[i] ^= 1 << self.rng.below(8);
                }
                1 => {
                    let i = self.rng.below(len + 1);
                    data.insert(i, self.rng.next() as u8);
                }
                2 if len > 0 => {
                    let a = self.rng.below(len);
                    let b = (a + 1 + self.rng.below(16)).min(len);
                    data.drain(a..b);
                }
                3 if len > 0 => {
                    // duplicate a chunk (repetition: long arrays, deep nesting)
                    let a = self.rng.below(len);
                    let b = (a + 1 + self.rng.below(64)).min(len);
                    let chunk = data[a..b].to_vec();
                    let most = if self.rng.chance(5) { 2000 } else { 8 };
                    let times = 1 + self.rng.below(most);
                    let at = self.rng.below(data.len() + 1);
                    let rep: Vec<u8> = chunk.iter().copied().cycle().take(chunk.len() * times).collect();
                    data.splice(at..at, rep);
                }
                4 => {
                    let t = tokens[self.rng.below(tokens.len())].as_bytes();
                    let at = self.rng.below(len + 1);
                    data.splice(at..at, t.iter().copied());
                }
                5 if len > 0 => {
                    // replace a run with a token
                    let t = tokens[self.rng.below(tokens.len())].as_bytes();
                    let a = self.rng.below(len);
                    let b = (a + 1 + self.rng.below(12)).min(len);
                    data.splice(a..b, t.iter().copied());
                }
                6 if len > 0 => data.truncate(self.rng.below(len)),
                7 => {
                    // splice with another corpus entry
                    let other = &self.corpus[self.rng.below(self.corpus.len())];
                    if !other.is_empty() {
                        let cut = self.rng.below(len + 1);
                        let from = self.rng.below(other.len());
                        let mut out = data[..cut].to_vec();
                        out.extend_from_slice(&other[from..]);
                        data = out;
                    }
                }
                _ => {
                    // an interesting number over a digit run
                    if let Some(i) = data.iter().position(|b| b.is_ascii_digit()) {
                        let j = i + data[i..].iter().take_while(|b| b.is_ascii_digit() || **b == b'.').count();
                        let n = ["0", "-1", "1e999", "9223372036854775808", "101", "4294967296", "1e15", "1.1e15"];
                        data.splice(i..j, n[self.rng.below(n.len())].bytes());
                    }
                }
            }
        }
        if data.len() > 2 << 20 {
            data.truncate(2 << 20);
        }
        data
    }

    fn record(&mut self, input: &[u8], class: Result<Class, String>) {
        self.execs += 1;
        match class {
            Ok(c) => {
                if self.classes.insert(c) {
                    if self.corpus.len() < 4096 {
                        self.corpus.push(input.to_vec());
                    } else {
                        // Full: a new class replaces a random entry (the seeds stay).
                        let i = self.seeds + self.rng.below(self.corpus.len() - self.seeds);
                        self.corpus[i] = input.to_vec();
                    }
                }
            }
            Err(what) => {
                let n = self.findings.len();
                let path = self.dir.join(format!("{}-{n}.bin", self.target));
                if std::fs::create_dir_all(&self.dir).is_ok() {
                    let _ = std::fs::write(&path, input);
                    let _ = std::fs::write(path.with_extension("txt"), &what);
                }
                eprintln!("FINDING {}: {what} (input saved to {})", self.target, path.display());
                self.findings.push((what, input.to_vec()));
            }
        }
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).expect("gzip");
    e.finish().expect("gzip")
}

/// Run `f` catching a panic, with its message.
fn guarded<T>(last_panic: &Arc<Mutex<String>>, f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|_| format!("panic: {}", last_panic.lock().unwrap()))
}

fn shape(msg: &str) -> String {
    // An error message without its numbers and quoted values: its "shape".
    let mut out = String::new();
    let mut in_quote = false;
    for c in msg.chars().take(48) {
        match c {
            '`' | '"' => in_quote = !in_quote,
            _ if in_quote => {}
            '0'..='9' => {
                if !out.ends_with('#') {
                    out.push('#')
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// Bytes that protobuf keys of the batch are made of (field 1-5 of `IngestBatch` and of
/// `Sample`, varint, 64-bit and length-delimited) and small varints. Tokens are text, so bytes
/// of 0x80 and above (varint continuations) come from the byte mutations instead.
const PROTOBUF_TOKENS: &[&str] =
    &["\u{0}", "\u{1}", "\u{7f}", "\n", "\u{12}", "\u{1a}", "\"", "*", "\u{8}", "\u{10}", ")", "1", "9", "\u{2}"];

fn zstd(bytes: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(bytes, 1).expect("zstd")
}

fn headers(content_type: &str, encoding: Option<&str>) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(CONTENT_TYPE, content_type.parse().unwrap());
    if let Some(e) = encoding {
        h.insert(CONTENT_ENCODING, e.parse().unwrap());
    }
    h
}

/// `input` decoded and validated under `headers`: never a panic or a 5xx; what is accepted,
/// re-encoded by `encode` into a plain body of `content_type`, is accepted again and `same`
/// as before.
fn ingest_case(
    input: &[u8],
    headers: &HeaderMap,
    content_type: &str,
    encode: impl FnOnce(&fleetlens_api::IngestBatch) -> Vec<u8>,
    same: impl FnOnce(&fleetlens_api::IngestBatch, &fleetlens_api::IngestBatch) -> bool,
) -> Result<Class, String> {
    let limits = DecodeLimits { max_decoded_bytes: 8 << 20, max_samples: 10_000 };
    match decode(headers, input, limits).and_then(|b| check(&b).map(|()| b)) {
        Err(e) => {
            let msg = e.to_string();
            let status = e.into_response().status();
            if !status.is_client_error() {
                return Err(format!("rejection with status {status}: {msg}"));
            }
            Ok(format!("err {status} {}", shape(&msg)))
        }
        Ok(batch) => {
            let again = encode(&batch);
            let unlimited = DecodeLimits { max_decoded_bytes: usize::MAX, max_samples: usize::MAX };
            let back = decode(&self::headers(content_type, None), &again, unlimited)
                .and_then(|b| check(&b).map(|()| b))
                .map_err(|e| format!("accepted batch, re-encoded, is rejected: {e}"))?;
            if !same(&back, &batch) {
                return Err("accepted batch changes when re-encoded".into());
            }
            Ok(format!(
                "ok samples={} labels={} events={}",
                batch.samples.len().min(3),
                batch.labels.len().min(3),
                batch.events.len().min(3)
            ))
        }
    }
}

/// Protobuf, optionally zstd; an accepted batch comes back equal.
fn ingest_protobuf_one(input: &[u8], compressed: bool) -> Result<Class, String> {
    const PROTOBUF: &str = "application/x-protobuf";
    let encode = |b: &fleetlens_api::IngestBatch| prost::Message::encode_to_vec(&pb::IngestBatch::from(b.clone()));
    ingest_case(input, &headers(PROTOBUF, compressed.then_some("zstd")), PROTOBUF, encode, |a, b| a == b)
}

/// JSON, optionally gzip; an accepted batch comes back with the same host and samples (JSON
/// numbers may not round-trip bit for bit).
fn ingest_one(input: &[u8], gz: bool) -> Result<Class, String> {
    const JSON: &str = "application/json";
    let encode = |b: &fleetlens_api::IngestBatch| serde_json::to_vec(b).expect("a decoded batch serialises");
    let same = |a: &fleetlens_api::IngestBatch, b: &fleetlens_api::IngestBatch| {
        a.samples.len() == b.samples.len() && a.host == b.host
    };
    ingest_case(input, &headers(JSON, gz.then_some("gzip")), JSON, encode, same)
}

fn condition_one(input: &[u8]) -> Result<Class, String> {
    let text = String::from_utf8_lossy(input);
    let chars = text.chars().count();
    match Condition::parse(&text) {
        Err(e) => {
            if e.column() > chars + 1 {
                return Err(format!("error column {} beyond the text ({chars} chars): {e}", e.column()));
            }
            let _ = e.pointer(&text);
            Ok(format!("err {}", shape(&e.to_string())))
        }
        Ok(c) => {
            let again = Condition::parse(&text).map_err(|e| format!("second parse fails: {e}"))?;
            if again != c {
                return Err("parse is not deterministic".into());
            }
            let truths: Vec<String> = condition_probes::eval_on_probes(&c).iter().map(|t| format!("{t:?}")).collect();
            Ok(format!("ok {} {}", c.fields().len().min(4), truths.join(",")))
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let target: &'static str = match args.get(1).map(String::as_str) {
        Some("ingest") => "ingest",
        Some("ingest-protobuf") => "ingest-protobuf",
        Some("condition") => "condition",
        _ => {
            eprintln!("usage: fuzz ingest|ingest-protobuf|condition SECONDS [SEED] [FINDINGS_DIR]");
            std::process::exit(2);
        }
    };
    let seconds: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(30);
    let seed: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(0x5eed_f1ee7);
    let dir = PathBuf::from(args.get(4).cloned().unwrap_or_else(|| "target/fuzz-findings".into()));

    let last_panic = Arc::new(Mutex::new(String::new()));
    {
        let last = last_panic.clone();
        std::panic::set_hook(Box::new(move |info| {
            *last.lock().unwrap() = format!("{info}");
        }));
    }

    let seeds: Vec<Vec<u8>> = match target {
        "ingest" | "ingest-protobuf" => {
            let fixture = include_str!("../../../tests/fixtures/nvml-h200-phases.jsonl");
            let lines: Vec<&str> = fixture.lines().take(6).collect();
            let now = 1_700_000_000_000i64;
            vec![
                format!("{{\"host\":\"gpu-node-01\",\"samples\":[{}]}}", lines.join(",")).into_bytes(),
                format!(
                    "{{\"host\":\"n\",\"agent_version\":\"0.1.0\",\"labels\":{{\"team\":\"ml\"}},\"samples\":[{{\"ts_ms\":{now},\"uuid\":\"GPU-1\",\"gpu_index\":0,\"gpu_util_pct\":50.0,\"mem_used_bytes\":1024,\"processes\":[{{\"pid\":7,\"used_bytes\":1,\"sm_pct\":3.5}}]}}]}}"
                )
                .into_bytes(),
                b"{\"host\":\"n\",\"samples\":[]}".to_vec(),
            ]
        }
        _ => {
            let mut s: Vec<Vec<u8>> = DEFAULT_RULES.iter().map(|r| r.condition.as_bytes().to_vec()).collect();
            s.push(b"gpu_util_pct >= 80 && sm_active_pct < 30".to_vec());
            s.push(b"host == 'node-*' || team != \"ml\" and not (mem_used_bytes / 2 > 1e9)".to_vec());
            s.push(b"-(-gpu_util_pct) * 2 - 1_000.5e-3 <= duration_in_state_s".to_vec());
            s
        }
    };
    // The protobuf target starts from the same batches, as the agent encodes them.
    let seeds: Vec<Vec<u8>> = if target == "ingest-protobuf" {
        seeds
            .iter()
            .map(|json| {
                let batch: fleetlens_api::IngestBatch = serde_json::from_slice(json).expect("a seed batch");
                prost::Message::encode_to_vec(&pb::IngestBatch::from(batch))
            })
            .collect()
    } else {
        seeds
    };
    let mut f = Fuzzer {
        rng: Rng(seed | 1),
        corpus: seeds.clone(),
        classes: HashSet::new(),
        execs: 0,
        findings: Vec::new(),
        dir,
        target,
        seeds: seeds.len(),
    };
    // The seeds themselves must pass.
    for s in &seeds {
        let class = match target {
            "ingest" => guarded(&last_panic, || ingest_one(s, false)).and_then(|r| r),
            "ingest-protobuf" => guarded(&last_panic, || ingest_protobuf_one(s, false)).and_then(|r| r),
            _ => guarded(&last_panic, || condition_one(s)).and_then(|r| r),
        };
        f.record(s, class);
    }
    let start = Instant::now();
    let limit = Duration::from_secs(seconds);
    while start.elapsed() < limit {
        for _ in 0..64 {
            let class = match target {
                "ingest" => {
                    let input = f.mutate(INGEST_TOKENS);
                    let (body, gz) = match f.rng.below(10) {
                        0..=6 => (input.clone(), false),
                        7 | 8 => (gzip(&input), true),
                        _ => {
                            // gzip, then damaged
                            let mut g = gzip(&input);
                            let cut = f.rng.below(g.len());
                            if f.rng.chance(50) {
                                g.truncate(cut);
                            } else {
                                g[cut] ^= 0x55;
                            }
                            (g, true)
                        }
                    };
                    let class = guarded(&last_panic, || ingest_one(&body, gz)).and_then(|r| r);
                    f.record(&body, class);
                    continue;
                }
                "ingest-protobuf" => {
                    let input = f.mutate(PROTOBUF_TOKENS);
                    let compressed = f.rng.chance(20);
                    let body = if compressed { zstd(&input) } else { input };
                    let class = guarded(&last_panic, || ingest_protobuf_one(&body, compressed)).and_then(|r| r);
                    f.record(&body, class);
                    continue;
                }
                _ => {
                    let input = f.mutate(CONDITION_TOKENS);
                    let class = guarded(&last_panic, || condition_one(&input)).and_then(|r| r);
                    (input, class)
                }
            };
            f.record(&class.0, class.1);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "target={target} seconds={secs:.0} execs={} execs_per_s={:.0} corpus={} outcome_classes={} findings={}",
        f.execs,
        f.execs as f64 / secs,
        f.corpus.len(),
        f.classes.len(),
        f.findings.len()
    );
    for (what, _) in f.findings.iter().take(10) {
        println!("  finding: {what}");
    }
    if !f.findings.is_empty() {
        std::process::exit(1);
    }
}
