//! Sending pre-built request bodies with a fixed number of requests in flight.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, CONTENT_ENCODING, CONTENT_TYPE};

/// What every request needs besides its body.
pub struct Target<'a> {
    pub url: String,
    pub bearer: Option<&'a str>,
    pub content_type: &'static str,
    /// `gzip` (Fleetlens ingest, VictoriaMetrics import) or `snappy` (remote write).
    pub content_encoding: &'static str,
    /// The one status that counts as success (Fleetlens 200, VictoriaMetrics import 204).
    pub success: StatusCode,
}

/// One request: its gzip body and the samples it carries.
pub struct Request {
    pub body: Vec<u8>,
    pub samples: usize,
}

/// The outcome of a whole run.
pub struct Sent {
    /// From the first request leaving to the last success arriving.
    pub wall: Duration,
    /// Per-request latency, sorted.
    pub latencies: Vec<Duration>,
    /// Answer bodies of the successful requests, in completion order.
    pub answers: Vec<(usize, Vec<u8>)>,
}

/// Send all requests, `concurrency` at a time. The first failure (transport error or any
/// status but `success`) aborts the run and is returned with the status and answer.
pub async fn send_all(
    client: &reqwest::Client,
    target: &Target<'_>,
    requests: Vec<Request>,
    concurrency: usize,
) -> Result<Sent> {
    let total = requests.len();
    let start = Instant::now();
    let mut stream = futures::stream::iter(requests.into_iter().enumerate())
        .map(|(i, req)| async move {
            let mut rb = client
                .post(&target.url)
                .header(CONTENT_TYPE, target.content_type)
                .header(CONTENT_ENCODING, target.content_encoding)
                .body(req.body);
            if let Some(token) = target.bearer {
                rb = rb.header(AUTHORIZATION, format!("Bearer {token}"));
            }
            let t0 = Instant::now();
            let resp =
                rb.send().await.with_context(|| format!("request {i}/{total} to {}: transport error", target.url))?;
            let status = resp.status();
            let answer = resp.bytes().await.with_context(|| format!("request {i}/{total}: reading the answer"))?;
            let latency = t0.elapsed();
            if status != target.success {
                let text = String::from_utf8_lossy(&answer[..answer.len().min(1000)]).into_owned();
                bail!(
                    "request {i}/{total} ({} samples) to {}: HTTP {status} (expected {}): {text}",
                    req.samples,
                    target.url,
                    target.success
                );
            }
            Ok::<_, anyhow::Error>((i, latency, answer.to_vec()))
        })
        .buffer_unordered(concurrency.max(1));
    let mut latencies = Vec::with_capacity(total);
    let mut answers = Vec::with_capacity(total);
    while let Some(r) = stream.next().await {
        let (i, latency, answer) = r?;
        latencies.push(latency);
        answers.push((i, answer));
    }
    let wall = start.elapsed();
    latencies.sort();
    Ok(Sent { wall, latencies, answers })
}

/// Nearest-rank percentile of sorted durations, in milliseconds.
pub fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1].as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile_ms(&v, 50.0), 50.0);
        assert_eq!(percentile_ms(&v, 99.0), 99.0);
        assert_eq!(percentile_ms(&v, 100.0), 100.0);
        assert_eq!(percentile_ms(&v[..1], 99.0), 1.0);
    }
}
