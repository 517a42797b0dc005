//! The data path's reads and writes, one trait per concern, each a part of [`Store`](crate::Store)
//! and implemented for both databases by `impl_store!` (`shared_store.rs`): the GPU registry,
//! raw samples in and out, and the rollups and credits that charts, the fleet summary and
//! billing read. The background jobs that close, seal and expire them stay on `Store`.

use async_trait::async_trait;
use fleetlens_core::{GpuId, OrgId, QualityFlags, Resolution, RollupBucket, Sample};

use crate::{
    BucketCredit, GpuRecord, HourCreditSplit, IngestOutcome, IngestRules, LatestMinute, ProcessList, Result, SeriesRow,
};

/// The GPU registry: which GPUs an organisation has, on which host, with what identity.
#[async_trait]
pub trait GpuStore: Send + Sync {
    /// An admin moves a GPU to `host` (a GPU physically moved, a host renamed); false when the
    /// organisation has no GPU `uuid`. Batches of the GPU from its old host are refused after.
    async fn move_gpu(&self, org: OrgId, uuid: &str, host: &str) -> Result<bool>;

    async fn gpus(&self, org: OrgId) -> Result<Vec<GpuRecord>>;
    /// Like [`GpuStore::gpus`] without the newest sample (cheaper, for reports).
    async fn gpu_identities(&self, org: OrgId) -> Result<Vec<GpuRecord>>;
    /// Like [`GpuStore::gpu`] without the newest sample (`latest` None): the GPU's id and
    /// identity for a read of its history, which would otherwise decode its newest sealed block first.
    async fn gpu_identity(&self, org: OrgId, uuid: &str) -> Result<Option<GpuRecord>>;
    async fn gpu(&self, org: OrgId, uuid: &str) -> Result<Option<GpuRecord>>;
}

/// One host's batch of samples on its way into the store ([`SampleStore::ingest_with`]), with
/// what the server found checking it. Each database writes it whole, in one transaction.
#[derive(Debug, Clone)]
pub struct SampleBatch {
    pub org: OrgId,
    /// The host the batch came from (its agent's `host`).
    pub host: String,
    /// Shared, so the caller keeps the batch it handed over without a copy (the samples the
    /// store inserted are named by index in [`IngestOutcome::written`](crate::IngestOutcome)).
    pub samples: std::sync::Arc<[Sample]>,
    /// `flags[i]`: the data-quality flags of `samples[i]`, whose flagged fields the server
    /// dropped; counted per flag in the rollups (`RollupBucket::quality`). Empty: none.
    pub flags: Vec<QualityFlags>,
    /// The organisation's quotas and the GPU-host rule; `None`: none apply (tools and tests).
    pub rules: Option<IngestRules>,
}

impl SampleBatch {
    /// A batch without flags or rules.
    pub fn new(org: OrgId, host: impl Into<String>, samples: impl Into<std::sync::Arc<[Sample]>>) -> Self {
        Self { org, host: host.into(), samples: samples.into(), flags: Vec::new(), rules: None }
    }
}

/// What a committed batch wrote, GPU by GPU ([`IngestOutcome::written`](crate::IngestOutcome)):
/// `seqs` are the `(gpu_id, ingest_seq)` its registry upsert returned, `inserted` the
/// `(gpu_id, index in the batch)` of the samples inserted, `filled` the GPUs of samples it
/// filled in. Both databases build it alike.
pub(crate) fn written_by_gpu(
    seqs: &[(i64, i64)],
    inserted: impl IntoIterator<Item = (i64, u32)>,
    filled: impl IntoIterator<Item = i64>,
) -> Vec<crate::GpuWritten> {
    let mut by_gpu: std::collections::HashMap<i64, crate::GpuWritten> = seqs
        .iter()
        .map(|&(gpu_id, ingest_seq)| {
            (gpu_id, crate::GpuWritten { gpu_id: GpuId(gpu_id), ingest_seq, inserted: Vec::new(), filled: false })
        })
        .collect();
    for (gpu_id, index) in inserted {
        by_gpu.entry(gpu_id).and_modify(|w| w.inserted.push(index));
    }
    for gpu_id in filled {
        by_gpu.entry(gpu_id).and_modify(|w| w.filled = true);
    }
    let mut written: Vec<_> = by_gpu.into_values().collect();
    written.sort_by_key(|w| w.gpu_id);
    written
}

/// Raw samples: a host's batches in, one GPU's samples and every GPU's newest minute out.
#[async_trait]
pub trait SampleStore: Send + Sync {
    /// Store a validated batch from one host, idempotent per (GPU uuid, ts_ms); updates the
    /// GPU registry and marks the minutes of the new samples for the rollup job
    /// ([`Store::close_minutes`](crate::Store::close_minutes)) in the same transaction.
    /// Returns once the batch is durably committed. No quota and no host rule apply (tools
    /// and tests): the server ingests with [`SampleStore::ingest_with`].
    async fn ingest(&self, org: OrgId, host: &str, samples: Vec<Sample>) -> Result<IngestOutcome> {
        self.ingest_with(SampleBatch::new(org, host, samples)).await
    }

    /// [`SampleStore::ingest`] of a batch the server checked: its data-quality flags are counted
    /// in the rollups, and its `rules` (when given) are checked in the batch's own transaction.
    /// A batch that would pass a quota ([`StoreError::QuotaExceeded`](crate::StoreError::QuotaExceeded))
    /// or that names a GPU of another host ([`StoreError::GpuOnOtherHost`](crate::StoreError::GpuOnOtherHost))
    /// is refused whole, nothing stored.
    async fn ingest_with(&self, batch: SampleBatch) -> Result<IngestOutcome>;

    /// Each GPU's newest minute: (gpu id, bucket, stored state, samples, first and last ts).
    async fn latest_minutes(&self, org: OrgId) -> Result<Vec<LatestMinute>>;
    /// [`SampleStore::latest_minutes`] of the organisation's GPUs with these ids only (others
    /// and unknown ids are left out): a reader that knows which GPUs moved re-reads just those.
    async fn latest_minutes_of(&self, org: OrgId, gpu_ids: &[GpuId]) -> Result<Vec<LatestMinute>>;
    /// Raw samples of one GPU of `org` with `from_ms <= ts_ms < to_ms`, oldest first, at most
    /// `limit` (none for a GPU of another organisation).
    async fn samples(&self, org: OrgId, gpu_id: GpuId, from_ms: i64, to_ms: i64, limit: u32) -> Result<Vec<Sample>>;
    /// The samples of [`SampleStore::samples`] as columns (identity fields not kept): sealed
    /// hours decoded straight into them, without building a [`Sample`] per sample.
    async fn sample_table(
        &self,
        org: OrgId,
        gpu_id: GpuId,
        from_ms: i64,
        to_ms: i64,
        limit: u32,
    ) -> Result<fleetlens_core::SampleTable>;
    /// Total raw samples stored (all organisations), open rows and sealed blocks; for metrics
    /// and tests.
    async fn sample_count(&self) -> Result<u64>;
}

/// Rollups and credits: a GPU's chart, an organisation's buckets for the fleet summary, the
/// credits and hour splits that billing sums, and the per-minute facts the reports read.
#[async_trait]
pub trait RollupStore: Send + Sync {
    /// Rollup rows of one GPU of `org` with `from_ms <= bucket_ms < to_ms`, oldest first (none
    /// for a GPU of another organisation).
    async fn rollups(
        &self,
        org: OrgId,
        gpu_id: GpuId,
        res: Resolution,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<RollupBucket>>;
    /// Chart points of one GPU of `org` from its rollups in `[from_ms, to_ms)`: only the columns
    /// a chart needs, and the minute's state at 1-minute resolution (none for a GPU of another
    /// organisation).
    async fn series(
        &self,
        org: OrgId,
        gpu_id: GpuId,
        res: Resolution,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<SeriesRow>>;
    /// Rollup rows of every GPU of `org` with `from_ms <= bucket_ms < to_ms`, ordered by GPU
    /// then time.
    async fn org_rollups(&self, org: OrgId, res: Resolution, from_ms: i64, to_ms: i64) -> Result<Vec<RollupBucket>>;
    /// Stored credits with `from_ms <= bucket_ms < to_ms` (see `fleetlens_core::Credit`) of
    /// every GPU of `org` (`gpus` `None`) or of the GPUs listed (ids of another organisation's
    /// GPUs find nothing): minute credits, or hour credits (sums of their minutes).
    async fn credits(
        &self,
        org: OrgId,
        gpus: Option<&[GpuId]>,
        res: Resolution,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<BucketCredit>>;
    /// The hour credits of `org` over a report period `[from_ms, end_ms)` that pro-rates its
    /// partial hours (billing), with the bulk summed in the database: see [`HourCreditSplit`].
    /// `first_whole_ms..last_whole_ms` are the whole hours inside the period.
    async fn org_hour_credit_split(
        &self,
        org: OrgId,
        from_ms: i64,
        end_ms: i64,
        first_whole_ms: i64,
        last_whole_ms: i64,
    ) -> Result<HourCreditSplit>;
    /// The distinct process lists per GPU and minute of the raw samples of `org` with
    /// `from_ms <= ts_ms < to_ms`, with their sample counts (raw samples are kept for the raw
    /// retention only): of every GPU of `org` (`gpus` `None`), or of the GPUs listed (ids of
    /// another organisation's GPUs find nothing). A caller that wants a few GPUs names them:
    /// the whole organisation's lists over a job's hours are its every raw sample.
    async fn process_lists(
        &self,
        org: OrgId,
        gpus: Option<&[GpuId]>,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<ProcessList>>;
    /// Peak memory used per GPU id of `org` over the hours overlapping `[from_ms, to_ms)`.
    async fn org_peak_mem(&self, org: OrgId, from_ms: i64, to_ms: i64) -> Result<Vec<(GpuId, i64)>>;
}
