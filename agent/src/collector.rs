//! Reads a [`GpuSource`] and turns its samples into spooled batches: one host per batch, at
//! most `batch_max` samples each. Collection never waits on the network; while the server is
//! down, batches pile up in the spool.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fleetlens_core::{GpuEvent, Sample, Thresholds, WindowAggregate, WorkloadState, classify};
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;

use crate::pusher::{MAX_BATCH_DECODED_BYTES, encode_batches};
use crate::source::{Finisher, GpuSource, HostSamples, SourceError};
use crate::spool::{SharedSpool, SpoolError};
use crate::wire::WireFormat;

#[derive(Debug, Clone)]
pub struct CollectorConfig {
    pub batch_max: usize,
    /// How long samples gather in memory before they are sealed into a batch, spooled and
    /// pushed (`--flush-interval`); a batch is sealed earlier when it reaches `batch_max`.
    pub flush_every: Duration,
    /// Time between two readings of a live source (`--interval`); zero for a replay. A batch
    /// is sealed with the reading that completes its flush interval rather than one reading
    /// later: at 1 s readings and a 5 s flush, every batch holds 5 readings.
    pub reading_interval: Duration,
    /// Stop after one reading of a live source (replay always runs to its end).
    pub once: bool,
    pub labels: BTreeMap<String, String>,
    /// Seal a host's batch with the reading in which one of its GPUs changed its
    /// [`StateClass`], instead of at the end of the flush interval (`--flush-on-state-change`):
    /// an open dashboard then hears of the change within a second or so. At most once per host
    /// per flush interval: a GPU that flaps every reading costs one request more per interval,
    /// and the server's learnt delivery cadence (which allows for the silence between batches
    /// before a GPU counts as offline) stays above half the flush interval.
    pub flush_on_state_change: bool,
    /// How batches are written to the spool and sent (`--wire-format`).
    pub wire_format: WireFormat,
}

/// What a single reading says a GPU is doing, coarsely: the distinctions an open dashboard
/// must show at once (free, held while idle, hung, working). The finer working states (hollow,
/// starved, memory-bound …) are judged over a window on the server; a single reading of a
/// sawtooth job flaps between them, and sealing a batch per flap would cost a request per
/// reading for nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateClass {
    Idle,
    IdleHeld,
    Stalled,
    Working,
}

impl StateClass {
    /// The class of one sample under the default thresholds (the agent does not know the
    /// organisation's own: a trigger for sending sooner, not a verdict).
    pub fn of(sample: &Sample) -> StateClass {
        let agg = WindowAggregate::from_samples(std::iter::once(sample));
        match classify(&agg, &DEFAULT_THRESHOLDS).state {
            WorkloadState::Idle => StateClass::Idle,
            WorkloadState::IdleHeld => StateClass::IdleHeld,
            WorkloadState::Stalled => StateClass::Stalled,
            _ => StateClass::Working,
        }
    }
}

static DEFAULT_THRESHOLDS: std::sync::LazyLock<Thresholds> = std::sync::LazyLock::new(Thresholds::default);

impl CollectorConfig {
    /// True when a batch whose first reading arrived `age` ago should be sealed now, with the
    /// reading that just arrived: it then covers `age + reading_interval`, and waiting for the
    /// next reading would overshoot by more than half an interval.
    fn due(&self, age: Duration) -> bool {
        age + self.reading_interval + self.reading_interval / 2 >= self.flush_every
    }

    /// When to seal a batch that is still open although no reading came (a stalled source).
    fn deadline(&self, opened: Instant) -> Instant {
        opened + self.flush_every + self.reading_interval
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CollectSummary {
    pub samples: u64,
    pub batches: u64,
    /// The source ran out (replay) or `--once` was satisfied, as opposed to a shutdown.
    pub finished: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("source failed: {0}")]
    Source(#[from] SourceError),
    #[error("cannot spool samples: {0}")]
    Spool(#[from] SpoolError),
}

struct Batcher {
    cfg: CollectorConfig,
    spool: SharedSpool,
    wake: Arc<Notify>,
    pending: BTreeMap<String, Vec<Sample>>,
    /// Events waiting for their host's next batch.
    pending_events: BTreeMap<String, Vec<GpuEvent>>,
    /// The newest labels each host's source gave (inventory, pods …).
    source_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// The source's completion of samples at sealing time.
    finisher: Option<Arc<dyn Finisher>>,
    /// Each GPU's [`StateClass`] in its newest reading (by UUID).
    classes: std::collections::HashMap<String, StateClass>,
    /// When each host's batch was last sealed early for a change of class.
    sealed_early: std::collections::HashMap<String, Instant>,
    sum: CollectSummary,
}

impl Batcher {
    /// The source's labels for `host`, with the command line's on top.
    fn labels(&self, host: &str) -> std::borrow::Cow<'_, BTreeMap<String, String>> {
        match self.source_labels.get(host).filter(|l| !l.is_empty()) {
            None => std::borrow::Cow::Borrowed(&self.cfg.labels),
            Some(from_source) => {
                let mut all = from_source.clone();
                all.extend(self.cfg.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
                std::borrow::Cow::Owned(all)
            }
        }
    }

    async fn spool_batch(&mut self, host: &str, samples: Vec<Sample>) -> Result<(), SpoolError> {
        let samples = finish(self.finisher.as_ref(), samples).await;
        let n = samples.len();
        // The host's events ride with its next batch (at most what the server takes in one).
        let mut events = self.pending_events.remove(host).unwrap_or_default();
        if events.len() > MAX_EVENTS_PER_BATCH {
            let rest = events.split_off(MAX_EVENTS_PER_BATCH);
            self.pending_events.insert(host.to_string(), rest);
        }
        let format = self.cfg.wire_format;
        for (body, part) in encode_batches(host, &self.labels(host), samples, events, MAX_BATCH_DECODED_BYTES, format) {
            self.spool.push(body, part, format).await?;
            self.sum.batches += 1;
        }
        self.sum.samples += n as u64;
        self.wake.notify_one();
        Ok(())
    }

    /// True when one of `samples` puts its GPU in another [`StateClass`] than its reading
    /// before (a GPU seen for the first time is no change).
    fn class_changed(&mut self, samples: &[Sample]) -> bool {
        let mut changed = false;
        for s in samples {
            let class = StateClass::of(s);
            match self.classes.get_mut(&s.uuid) {
                Some(old) if *old != class => {
                    *old = class;
                    changed = true;
                }
                Some(_) => {}
                None => {
                    self.classes.insert(s.uuid.clone(), class);
                }
            }
        }
        changed
    }

    /// Seal `host`'s open batch now (a GPU of it changed class), unless it was sealed early
    /// less than a flush interval ago.
    async fn seal_early(&mut self, host: &str, now: Instant) -> Result<(), SpoolError> {
        if self.sealed_early.get(host).is_some_and(|t| now.saturating_duration_since(*t) < self.cfg.flush_every) {
            return Ok(());
        }
        self.sealed_early.insert(host.to_string(), now);
        if let Some(samples) = self.pending.remove(host)
            && (!samples.is_empty() || self.pending_events.contains_key(host))
        {
            self.spool_batch(host, samples).await?;
        }
        Ok(())
    }

    async fn add(
        &mut self,
        host: String,
        samples: Vec<Sample>,
        labels: BTreeMap<String, String>,
        events: Vec<GpuEvent>,
    ) -> Result<(), SpoolError> {
        if !labels.is_empty() {
            self.source_labels.insert(host.clone(), labels);
        }
        if !events.is_empty() {
            self.pending_events.entry(host.clone()).or_default().extend(events);
        }
        let max = self.cfg.batch_max;
        let mut buf = self.pending.remove(&host).unwrap_or_default();
        buf.extend(samples);
        // Full batches go now; the remainder waits for more samples of the same host.
        while buf.len() >= max {
            let rest = buf.split_off(max);
            self.spool_batch(&host, buf).await?;
            buf = rest;
        }
        if !buf.is_empty() || self.pending_events.contains_key(&host) {
            self.pending.insert(host, buf);
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), SpoolError> {
        for (host, samples) in std::mem::take(&mut self.pending) {
            // A host whose GPUs all stopped answering still sends its events.
            if !samples.is_empty() || self.pending_events.contains_key(&host) {
                self.spool_batch(&host, samples).await?;
            }
        }
        Ok(())
    }
}

/// Runs until the source ends, `--once` is satisfied, or `shutdown` turns true; whatever is
/// buffered is spooled before returning, even on shutdown.
///
/// The source is read by a task of its own and handed over through a channel, so that sealing a
/// batch on time (or a shutdown) never cancels a reading halfway.
pub async fn run(
    source: Box<dyn GpuSource>,
    spool: SharedSpool,
    wake: Arc<Notify>,
    cfg: CollectorConfig,
    mut shutdown: watch::Receiver<bool>,
) -> Result<CollectSummary, CollectError> {
    let once_live = cfg.once && source.is_live();
    let finisher = source.finisher();
    let (tx, mut rx) = mpsc::channel(READINGS_QUEUED);
    let reader = AbortOnDrop(tokio::spawn(read_source(source, tx)));
    let mut b = Batcher {
        cfg,
        spool,
        wake,
        pending: BTreeMap::new(),
        pending_events: BTreeMap::new(),
        source_labels: BTreeMap::new(),
        finisher,
        classes: std::collections::HashMap::new(),
        sealed_early: std::collections::HashMap::new(),
        sum: CollectSummary::default(),
    };
    // When the open batch got its first reading.
    let mut opened: Option<Instant> = None;
    let result = loop {
        if *shutdown.borrow_and_update() {
            break Ok(());
        }
        let deadline = opened.map(|t| b.cfg.deadline(t));
        let reading = tokio::select! {
            r = rx.recv() => r,
            _ = wait_for_shutdown(&mut shutdown) => break Ok(()),
            _ = sleep_until_opt(deadline) => {
                // The source is late: seal what it gave so far.
                b.flush().await?;
                opened = None;
                continue;
            }
        };
        let hosts = match reading {
            Some(Ok(Some(hosts))) => hosts,
            Some(Ok(None)) => {
                b.sum.finished = true;
                break Ok(());
            }
            Some(Err(e)) => break Err(CollectError::from(e)),
            None => break Err(CollectError::Source(SourceError::Failed("the source's task stopped".into()))),
        };
        let now = Instant::now();
        let mut changed_hosts = Vec::new();
        for h in hosts {
            if b.cfg.flush_on_state_change && b.class_changed(&h.samples) {
                changed_hosts.push(h.host.clone());
            }
            b.add(h.host, h.samples, h.labels, h.events).await?;
        }
        for host in &changed_hosts {
            b.seal_early(host, now).await?;
        }
        if once_live {
            b.sum.finished = true;
            break Ok(());
        }
        if b.pending.is_empty() {
            // Everything went out in full batches (or the reading was empty).
            opened = None;
            continue;
        }
        let since = *opened.get_or_insert(now);
        if b.cfg.due(now.saturating_duration_since(since)) {
            b.flush().await?;
            opened = None;
        }
    };
    drop(reader);
    // Readings already handed over are kept too.
    while let Ok(Ok(Some(hosts))) = rx.try_recv() {
        for h in hosts {
            b.add(h.host, h.samples, h.labels, h.events).await?;
        }
    }
    // Keep what was read even when the source failed or we are shutting down.
    b.flush().await?;
    result.map(|()| b.sum)
}

/// The samples, completed by the source's finisher on a blocking thread (it may call into a
/// driver for milliseconds). A finisher that panics leaves them as they were read.
async fn finish(finisher: Option<&Arc<dyn Finisher>>, mut samples: Vec<Sample>) -> Vec<Sample> {
    let Some(f) = finisher.filter(|_| !samples.is_empty()).cloned() else { return samples };
    let done = tokio::task::spawn_blocking(move || {
        let finished = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f.finish(&mut samples)));
        if finished.is_err() {
            tracing::error!("completing the samples of a batch failed; they are sent as read");
        }
        samples
    });
    match done.await {
        Ok(samples) => samples,
        // Only a cancelled runtime gets here (the closure catches panics): nothing to send.
        Err(e) => {
            tracing::error!(error = %e, "the task completing a batch did not finish");
            Vec::new()
        }
    }
}

/// Events per batch, at most (the server's limit).
const MAX_EVENTS_PER_BATCH: usize = 1_000;

/// Readings waiting for the collector (it only falls behind while a spool write is slow).
const READINGS_QUEUED: usize = 4;

type Reading = Result<Option<Vec<HostSamples>>, SourceError>;

/// Reads the source until it ends or fails, or the collector goes away.
async fn read_source(mut source: Box<dyn GpuSource>, tx: mpsc::Sender<Reading>) {
    loop {
        let r = source.next().await;
        let last = !matches!(r, Ok(Some(_)));
        if tx.send(r).await.is_err() || last {
            return;
        }
    }
}

/// Stops the reading task when the collector returns (the source's `next` is cancel-safe).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

async fn wait_for_shutdown(shutdown: &mut watch::Receiver<bool>) {
    // A dropped sender can no longer ask for a shutdown: keep collecting.
    if shutdown.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;
    use fleetlens_api::IngestBatch;

    use super::*;
    use crate::spool::Spool;

    /// A finite source of `ticks` readings of two hosts with `per_host` samples each.
    struct Fixed {
        ticks: i64,
        per_host: usize,
        t: i64,
    }

    #[async_trait]
    impl GpuSource for Fixed {
        fn describe(&self) -> String {
            "fixed".into()
        }
        fn is_live(&self) -> bool {
            false
        }
        async fn next(&mut self) -> Result<Option<Vec<HostSamples>>, SourceError> {
            if self.t == self.ticks {
                return Ok(None);
            }
            self.t += 1;
            let mk = |host: &str| {
                let mut h = HostSamples::new(
                    host,
                    (0..self.per_host)
                        .map(|i| Sample { ts_ms: self.t, uuid: format!("{host}-{i}"), ..Default::default() })
                        .collect(),
                );
                h.labels.insert("source.kind".into(), "fixed".into());
                h.labels.insert("team".into(), "from-source".into());
                h
            };
            Ok(Some(vec![mk("a"), mk("b")]))
        }
    }

    /// A spooled body, in the default wire format the tests' collectors write.
    fn decode(body: &[u8]) -> IngestBatch {
        WireFormat::default().decode(body).unwrap()
    }

    /// A replay's configuration: batches of at most `batch_max` samples, a flush interval
    /// that never comes.
    fn replay_cfg(batch_max: usize) -> CollectorConfig {
        CollectorConfig { once: true, ..test_cfg(Duration::from_secs(3600), Duration::ZERO, batch_max) }
    }

    fn test_cfg(flush_every: Duration, reading_interval: Duration, batch_max: usize) -> CollectorConfig {
        CollectorConfig {
            batch_max,
            flush_every,
            reading_interval,
            once: false,
            labels: BTreeMap::new(),
            flush_on_state_change: false,
            wire_format: WireFormat::default(),
        }
    }

    /// `src` collected under `cfg` into a fresh spool until it ends: the spool's directory
    /// (to keep while the test reads it), the spool and the summary.
    async fn collect(
        src: impl GpuSource + 'static,
        cfg: CollectorConfig,
    ) -> (tempfile::TempDir, SharedSpool, CollectSummary) {
        let dir = tempfile::tempdir().unwrap();
        let spool = SharedSpool::new(Spool::open(dir.path(), 1 << 30).unwrap());
        let (_tx, rx) = watch::channel(false);
        let sum = run(Box::new(src), spool.clone(), Arc::new(Notify::new()), cfg, rx).await.unwrap();
        (dir, spool, sum)
    }

    /// Every spooled batch, oldest first.
    fn spooled(spool: &SharedSpool) -> Vec<IngestBatch> {
        spool.peek(|s| s.entries()).iter().map(|e| decode(&spool.peek(|s| s.read(e)).unwrap())).collect()
    }

    #[tokio::test]
    async fn batches_per_host_within_the_limit() {
        let cfg =
            CollectorConfig { labels: [("team".to_string(), "ml".to_string())].into_iter().collect(), ..replay_cfg(7) };
        let (_dir, spool, sum) = collect(Fixed { ticks: 10, per_host: 3, t: 0 }, cfg).await;
        assert!(sum.finished);
        assert_eq!(sum.samples, 60);

        let entries = spool.peek(|s| s.entries());
        let mut per_host: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for (e, batch) in entries.iter().zip(spooled(&spool)) {
            assert!(batch.samples.len() <= 7 && !batch.samples.is_empty());
            assert_eq!(batch.samples.len(), e.samples);
            assert!(batch.samples.iter().all(|s| s.uuid.starts_with(&batch.host)));
            // The source's labels travel with the batch; the command line's win on a clash.
            assert_eq!(batch.labels["source.kind"], "fixed");
            assert_eq!(batch.labels["team"], "ml");
            per_host.entry(batch.host).or_default().extend(batch.samples.iter().map(|s| s.ts_ms));
        }
        // Every sample once, in time order within each host.
        for ts in per_host.values() {
            assert_eq!(ts.len(), 30);
            assert!(ts.windows(2).all(|w| w[0] <= w[1]));
        }
        assert_eq!(sum.batches as usize, entries.len());
    }

    /// `Fixed` with a finisher that sets each sample's utilization to the number of samples it
    /// was finished with, and counts its calls.
    struct Finishing {
        inner: Fixed,
        calls: Arc<std::sync::atomic::AtomicUsize>,
    }

    struct CountingFinisher(Arc<std::sync::atomic::AtomicUsize>);

    impl Finisher for CountingFinisher {
        fn finish(&self, samples: &mut [Sample]) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let n = samples.len() as f64;
            for s in samples {
                assert_eq!(s.gpu_util_pct, None, "a sample finished twice");
                s.gpu_util_pct = Some(n);
            }
        }
    }

    #[async_trait]
    impl GpuSource for Finishing {
        fn describe(&self) -> String {
            "finishing".into()
        }
        fn is_live(&self) -> bool {
            false
        }
        async fn next(&mut self) -> Result<Option<Vec<HostSamples>>, SourceError> {
            self.inner.next().await
        }
        fn finisher(&self) -> Option<Arc<dyn Finisher>> {
            Some(Arc::new(CountingFinisher(self.calls.clone())))
        }
    }

    #[tokio::test]
    async fn every_sealed_sample_is_finished_once_with_its_batch() {
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let src = Finishing { inner: Fixed { ticks: 10, per_host: 3, t: 0 }, calls: calls.clone() };
        let cfg = CollectorConfig { once: false, ..replay_cfg(7) };
        let (_dir, spool, sum) = collect(src, cfg).await;
        assert_eq!(sum.samples, 60);
        let entries = spool.peek(|s| s.entries());
        // Full batches of 7 as they fill, then the remainder of each host at the end.
        assert_eq!(entries.len(), 10);
        let mut seen = 0;
        for batch in spooled(&spool) {
            let n = batch.samples.len() as f64;
            assert!(batch.samples.iter().all(|s| s.gpu_util_pct == Some(n)), "{:?}", batch.samples);
            seen += batch.samples.len();
        }
        assert_eq!(seen, 60);
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), entries.len());
    }

    /// Two readings of one host: a sample with an XID error, then no sample (the GPU lost).
    struct Failing {
        n: i64,
    }

    #[async_trait]
    impl GpuSource for Failing {
        fn describe(&self) -> String {
            "failing".into()
        }
        fn is_live(&self) -> bool {
            false
        }
        async fn next(&mut self) -> Result<Option<Vec<HostSamples>>, SourceError> {
            self.n += 1;
            let event = |kind| GpuEvent { ts_ms: self.n, uuid: "GPU-1".into(), kind, xid: None, message: None };
            let h = match self.n {
                1 => {
                    let mut h =
                        HostSamples::new("h", vec![Sample { ts_ms: 1, uuid: "GPU-1".into(), ..Default::default() }]);
                    h.events.push(GpuEvent { xid: Some(79), ..event(fleetlens_core::GpuEventKind::Xid) });
                    h
                }
                2 => {
                    let mut h = HostSamples::new("h", vec![]);
                    h.events.push(event(fleetlens_core::GpuEventKind::GpuLost));
                    h
                }
                _ => return Ok(None),
            };
            Ok(Some(vec![h]))
        }
    }

    #[tokio::test]
    async fn events_ride_with_the_next_batch_even_without_samples() {
        let (_dir, spool, sum) = collect(Failing { n: 0 }, replay_cfg(1)).await;
        assert_eq!(sum.samples, 1);
        let got = spooled(&spool);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!((got[0].samples.len(), got[0].events.len(), got[0].events[0].xid), (1, 1, Some(79)));
        assert_eq!((got[1].samples.len(), got[1].events.len()), (0, 1));
        assert_eq!(got[1].events[0].kind, fleetlens_core::GpuEventKind::GpuLost);
    }

    /// A live source: one GPU, one sample per `period` (the first at once), stamped with its
    /// reading number; after `readings` it stalls (like a hung driver) or ends.
    struct Live {
        period: Duration,
        readings: i64,
        n: i64,
        stall_after: bool,
    }

    #[async_trait]
    impl GpuSource for Live {
        fn describe(&self) -> String {
            "live".into()
        }
        fn is_live(&self) -> bool {
            true
        }
        async fn next(&mut self) -> Result<Option<Vec<HostSamples>>, SourceError> {
            if self.n > 0 {
                tokio::time::sleep(self.period).await;
            }
            if self.n == self.readings {
                if self.stall_after {
                    std::future::pending::<()>().await;
                }
                return Ok(None);
            }
            self.n += 1;
            let s = Sample { ts_ms: self.n, uuid: "GPU-1".into(), ..Default::default() };
            Ok(Some(vec![HostSamples::new("h", vec![s])]))
        }
    }

    /// The readings (`ts_ms`) of each spooled batch, oldest first.
    fn batches(spool: &SharedSpool) -> Vec<Vec<i64>> {
        spooled(spool).iter().map(|b| b.samples.iter().map(|s| s.ts_ms).collect()).collect()
    }

    async fn collect_live(src: Live, cfg: CollectorConfig) -> (CollectSummary, Vec<Vec<i64>>) {
        let (_dir, spool, sum) = collect(src, cfg).await;
        (sum, batches(&spool))
    }

    /// `src` collecting under `cfg` into a fresh spool in the background: the spool's directory
    /// (to keep while the test runs), the spool, the stop switch and the run.
    fn start_live(
        src: Live,
        cfg: CollectorConfig,
    ) -> (
        tempfile::TempDir,
        SharedSpool,
        watch::Sender<bool>,
        tokio::task::JoinHandle<Result<CollectSummary, CollectError>>,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let spool = SharedSpool::new(Spool::open(dir.path(), 1 << 30).unwrap());
        let (stop_tx, stop_rx) = watch::channel(false);
        let task = tokio::spawn(run(Box::new(src), spool.clone(), Arc::new(Notify::new()), cfg, stop_rx));
        (dir, spool, stop_tx, task)
    }

    #[tokio::test(start_paused = true)]
    async fn one_batch_per_flush_interval() {
        let sec = Duration::from_secs(1);
        // 1-s readings, 5-s flush: 5 readings per batch; the rest when the source ends.
        let src = Live { period: sec, readings: 12, n: 0, stall_after: false };
        let (sum, got) = collect_live(src, test_cfg(5 * sec, sec, 5000)).await;
        assert_eq!(got, [vec![1, 2, 3, 4, 5], vec![6, 7, 8, 9, 10], vec![11, 12]]);
        assert_eq!((sum.samples, sum.batches), (12, 3));

        // Flush interval = reading interval: every reading is a batch.
        let src = Live { period: sec, readings: 3, n: 0, stall_after: false };
        let (_, got) = collect_live(src, test_cfg(sec, sec, 5000)).await;
        assert_eq!(got, [vec![1], vec![2], vec![3]]);

        // Readings slower than the flush interval: every reading is a batch too.
        let src = Live { period: 10 * sec, readings: 2, n: 0, stall_after: false };
        let (_, got) = collect_live(src, test_cfg(5 * sec, 10 * sec, 5000)).await;
        assert_eq!(got, [vec![1], vec![2]]);

        // 500-ms readings, 2-s flush: 4 readings per batch.
        let half = Duration::from_millis(500);
        let src = Live { period: half, readings: 8, n: 0, stall_after: false };
        let (_, got) = collect_live(src, test_cfg(2 * sec, half, 5000)).await;
        assert_eq!(got, [vec![1, 2, 3, 4], vec![5, 6, 7, 8]]);

        // --batch-max seals a batch before its time.
        let src = Live { period: sec, readings: 10, n: 0, stall_after: false };
        let (_, got) = collect_live(src, test_cfg(5 * sec, sec, 3)).await;
        assert_eq!(got, [vec![1, 2, 3], vec![4, 5, 6], vec![7, 8, 9], vec![10]]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_source_still_gets_its_batch_sealed_and_shutdown_spools_the_rest() {
        let sec = Duration::from_secs(1);
        let src = Live { period: sec, readings: 2, n: 0, stall_after: true };
        let (_dir, spool, stop_tx, task) = start_live(src, test_cfg(5 * sec, sec, 5000));
        // Two readings (t = 0, 1 s), then nothing: sealed one interval after the flush was due.
        tokio::time::sleep(Duration::from_millis(5500)).await;
        assert!(batches(&spool).is_empty());
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(batches(&spool), [vec![1, 2]]);
        stop_tx.send(true).unwrap();
        let sum = task.await.unwrap().unwrap();
        assert!(!sum.finished);
        assert_eq!(sum.samples, 2);

        // A shutdown in the middle of a flush interval spools what was read so far.
        let src = Live { period: sec, readings: 100, n: 0, stall_after: false };
        let (_dir, spool, stop_tx, task) = start_live(src, test_cfg(5 * sec, sec, 5000));
        tokio::time::sleep(Duration::from_millis(7500)).await;
        assert_eq!(batches(&spool), [vec![1, 2, 3, 4, 5]]);
        stop_tx.send(true).unwrap();
        let sum = task.await.unwrap().unwrap();
        assert_eq!(batches(&spool), [vec![1, 2, 3, 4, 5], vec![6, 7, 8]]);
        assert_eq!((sum.samples, sum.batches, sum.finished), (8, 2, false));
    }

    /// Two hosts of one GPU each, a reading per second: `a`'s GPU is busy in the readings
    /// `busy` says, idle in the others; `b`'s stays idle.
    struct Flipping {
        readings: i64,
        busy: fn(i64) -> bool,
        n: i64,
    }

    fn idle(ts_ms: i64, uuid: &str) -> Sample {
        Sample {
            ts_ms,
            uuid: uuid.into(),
            gpu_util_pct: Some(0.0),
            sm_active_pct: Some(0.0),
            mem_used_bytes: Some(0),
            processes: Some(vec![]),
            ..Default::default()
        }
    }

    #[async_trait]
    impl GpuSource for Flipping {
        fn describe(&self) -> String {
            "flipping".into()
        }
        fn is_live(&self) -> bool {
            true
        }
        async fn next(&mut self) -> Result<Option<Vec<HostSamples>>, SourceError> {
            if self.n > 0 {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            if self.n == self.readings {
                return Ok(None);
            }
            self.n += 1;
            let mut a = idle(self.n, "GPU-a");
            if (self.busy)(self.n) {
                a.gpu_util_pct = Some(100.0);
                a.sm_active_pct = Some(95.0);
                a.tensor_active_pct = Some(80.0);
                a.mem_used_bytes = Some(40 << 30);
                a.processes = Some(vec![fleetlens_core::GpuProcess { pid: 7, ..Default::default() }]);
            }
            Ok(Some(vec![HostSamples::new("a", vec![a]), HostSamples::new("b", vec![idle(self.n, "GPU-b")])]))
        }
    }

    #[test]
    fn one_reading_gives_the_coarse_class() {
        assert_eq!(StateClass::of(&idle(1, "g")), StateClass::Idle);
        let held = Sample { mem_used_bytes: Some(4 << 30), ..idle(1, "g") };
        assert_eq!(StateClass::of(&held), StateClass::IdleHeld);
        let stalled = Sample {
            gpu_util_pct: Some(100.0),
            sm_active_pct: Some(1.0),
            power_w: Some(100.0),
            power_limit_w: Some(700.0),
            processes: Some(vec![fleetlens_core::GpuProcess { pid: 7, ..Default::default() }]),
            ..idle(1, "g")
        };
        assert_eq!(StateClass::of(&stalled), StateClass::Stalled);
        let hollow = Sample { sm_active_pct: Some(10.0), power_w: Some(400.0), ..stalled.clone() };
        assert_eq!(StateClass::of(&hollow), StateClass::Working);
    }

    #[tokio::test(start_paused = true)]
    async fn a_host_whose_gpu_changes_class_is_sent_with_that_reading() {
        let sec = Duration::from_secs(1);
        let cfg = CollectorConfig { flush_on_state_change: true, ..test_cfg(5 * sec, sec, 5000) };
        // Busy from reading 7, idle again at 9 (2 s after the early seal at 7: too soon for
        // another), busy again at 13 (6 s after it).
        let src = Flipping { readings: 15, busy: |n| (7..9).contains(&n) || n >= 13, n: 0 };
        let (_dir, spool, _) = collect(src, cfg).await;
        let by_host = |host: &str| -> Vec<Vec<i64>> {
            spooled(&spool)
                .into_iter()
                .filter(|b| b.host == host)
                .map(|b| b.samples.iter().map(|s| s.ts_ms).collect())
                .collect()
        };
        // Reading 7 turns a's GPU busy: a's open batch goes with it, not at reading 10 (then
        // a keeps the common flush timer: one request more for the change). Reading 9 waits
        // for the timer; reading 13 goes at once again.
        assert_eq!(by_host("a"), [vec![1, 2, 3, 4, 5], vec![6, 7], vec![8, 9, 10], vec![11, 12, 13], vec![14, 15]]);
        // b's GPU changed nothing: its batches keep the flush interval.
        assert_eq!(by_host("b"), [vec![1, 2, 3, 4, 5], vec![6, 7, 8, 9, 10], vec![11, 12, 13, 14, 15]]);
    }
}
