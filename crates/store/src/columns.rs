//! The sample and rollup column lists shared by both backends, and the mapping between
//! database rows and [`Sample`] / [`RollupBucket`].

use fleetlens_core::signal::{Precision, SIGNALS, Signal};
use fleetlens_core::{GpuProcess, PodAllocation, ROLLUP_SIGNALS, RollupBucket, Sample, SignalStats};

/// A nullable numeric cell of a sample row.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Cell {
    F(Option<f64>),
    I(Option<i64>),
}

/// The measurement columns of `samples`, in table order (after gpu_id, ts_ms; before processes):
/// every signal of the core signal table, by its name. The order is also the column order of
/// sealed sample blocks, so it never changes; a new signal goes at the end.
pub(crate) const SAMPLE_COLUMNS: [&str; fleetlens_core::signal::SIGNALS.len()] = [
    "gpu_util_pct",
    "mem_util_pct",
    "mem_used_bytes",
    "mem_total_bytes",
    "power_w",
    "power_limit_w",
    "energy_j",
    "temp_c",
    "sm_clock_mhz",
    "throttle_reasons",
    "sm_active_pct",
    "gr_engine_active_pct",
    "sm_occupancy_pct",
    "tensor_active_pct",
    "dram_active_pct",
    "fp16_active_pct",
    "fp32_active_pct",
    "fp64_active_pct",
    "int_active_pct",
    "pcie_tx_mib_s",
    "pcie_rx_mib_s",
    "nvlink_tx_mib_s",
    "nvlink_rx_mib_s",
    "tensor_hmma_active_pct",
];

/// The signal of each column of [`SAMPLE_COLUMNS`], in that order (const: a name that is not a
/// signal does not compile).
pub(crate) const SAMPLE_SIGNALS: [&Signal; SAMPLE_COLUMNS.len()] = {
    let mut out = [&SIGNALS[0]; SAMPLE_COLUMNS.len()];
    let mut i = 0;
    while i < out.len() {
        out[i] = &SIGNALS[fleetlens_core::signal::index_of(SAMPLE_COLUMNS[i])];
        i += 1;
    }
    out
};

/// Whether the column of `signal` is an integer one (INTEGER / BIGINT): the signals kept
/// exactly are the integer ones (bytes, a bitmask); every other is REAL / DOUBLE PRECISION.
pub(crate) fn is_integer(signal: &Signal) -> bool {
    signal.precision == Precision::Exact
}

/// The cells of `s` in [`SAMPLE_COLUMNS`] order, read through the signal table.
pub(crate) fn sample_cells(s: &Sample) -> [Cell; SAMPLE_COLUMNS.len()] {
    SAMPLE_SIGNALS.map(|signal| {
        // Integer columns through the exact accessor (a bitmask keeps all 64 bits).
        if is_integer(signal) { Cell::I((signal.get_int)(s)) } else { Cell::F((signal.get)(s)) }
    })
}

/// The process list as stored: JSON text, NULL when the list was not read.
pub(crate) fn processes_json(s: &Sample) -> Option<String> {
    s.processes.as_ref().map(|p| serde_json::to_string(p).expect("processes serialize"))
}

/// The kubelet's pod allocations as stored: JSON text, NULL when there are none.
pub(crate) fn allocations_json(s: &Sample) -> Option<String> {
    (!s.allocations.is_empty()).then(|| serde_json::to_string(&s.allocations).expect("allocations serialize"))
}

/// Stored allocations back; NULL (or, never written by us, unreadable JSON) is none.
pub(crate) fn parse_allocations(text: Option<&str>) -> Vec<PodAllocation> {
    text.and_then(|t| serde_json::from_str(t).ok()).unwrap_or_default()
}

/// Select list of a sample row's stored values with a table alias: the measurements' payload
/// ([`crate::row_values`]) and the lists; `processes_expr` is how the backend turns the stored
/// process list into text.
pub(crate) fn sample_select_list(alias: &str, processes_expr: &str) -> String {
    format!("{alias}.vals AS vals, {processes_expr} AS processes, {alias}.allocations AS allocations")
}

/// The stored values of a sample row (everything but identity and time): its measurements,
/// decoded from their payload, then the stored lists.
#[derive(Debug)]
pub(crate) struct SampleValues {
    /// A sample with only its measurements set.
    measured: Sample,
    processes: Option<String>,
    allocations: Option<String>,
}

impl<'r, R> sqlx::FromRow<'r, R> for SampleValues
where
    R: sqlx::Row,
    &'r str: sqlx::ColumnIndex<R>,
    &'r [u8]: sqlx::Type<R::Database> + sqlx::Decode<'r, R::Database>,
    String: sqlx::Type<R::Database> + sqlx::Decode<'r, R::Database>,
{
    fn from_row(row: &'r R) -> Result<Self, sqlx::Error> {
        // NULL: no sample (a GPU row left-joined to a newest sample it does not have).
        let measured = match row.try_get::<Option<&[u8]>, _>("vals")? {
            Some(payload) => crate::row_values::decode(payload)
                .map_err(|e| sqlx::Error::ColumnDecode { index: "vals".into(), source: Box::new(e) })?,
            None => Sample::default(),
        };
        Ok(SampleValues { measured, processes: row.try_get("processes")?, allocations: row.try_get("allocations")? })
    }
}

impl SampleValues {
    pub(crate) fn into_sample(self, ts_ms: i64, uuid: &str, gpu_index: Option<u32>, name: Option<&str>) -> Sample {
        Sample {
            ts_ms,
            uuid: uuid.to_string(),
            gpu_index,
            name: name.map(str::to_string),
            // Written by us from a Vec<GpuProcess>; unreadable JSON would be corruption, which
            // we surface as "not read" rather than failing the whole query.
            processes: self.processes.and_then(|p| serde_json::from_str::<Vec<GpuProcess>>(&p).ok()),
            allocations: parse_allocations(self.allocations.as_deref()),
            ..self.measured
        }
    }
}

/// One sample row as selected: time plus measurements.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct SampleRow {
    pub ts_ms: i64,
    #[sqlx(flatten)]
    pub values: SampleValues,
}

/// A GPU row joined with its newest sample (all sample columns NULL when it has none).
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct GpuRow {
    #[sqlx(flatten)]
    pub record: crate::GpuRecord,
    pub latest_ts_ms: Option<i64>,
    #[sqlx(flatten)]
    pub values: SampleValues,
}

impl GpuRow {
    pub(crate) fn into_record(self) -> crate::GpuRecord {
        let GpuRow { mut record, latest_ts_ms, values } = self;
        let info = &record.info;
        record.latest = latest_ts_ms.map(|ts| values.into_sample(ts, &info.uuid, info.gpu_index, info.name.as_deref()));
        record
    }
}

/// SELECT … FROM gpus g joined to its newest open sample `s` (`newest_join`, the dialect's
/// `NEWEST_SAMPLE_JOIN`) for a backend.
pub(crate) fn gpu_select(processes_expr: &str, newest_join: &str) -> String {
    format!(
        "SELECT {}, s.ts_ms AS latest_ts_ms, {} FROM gpus g {newest_join}",
        crate::GPU_RECORD_COLUMNS,
        sample_select_list("s", processes_expr)
    )
}

/// Column names of a rollup table after (gpu_id, bucket_ms), in [`rollup_cells`] order.
pub(crate) fn rollup_columns() -> Vec<String> {
    let mut cols: Vec<String> =
        ["sample_count", "allocated_count", "processes_read_count", "first_ts_ms", "last_ts_ms", "sampled_ms"]
            .iter()
            .map(|c| c.to_string())
            .collect();
    cols.extend(quality_columns());
    for s in ROLLUP_SIGNALS {
        for part in ["count", "sum", "min", "max"] {
            cols.push(format!("{s}_{part}"));
        }
    }
    cols
}

/// The cells of a rollup delta in [`rollup_columns`] order.
pub(crate) fn rollup_cells(b: &RollupBucket) -> Vec<Cell> {
    let mut cells = vec![
        Cell::I(Some(b.sample_count)),
        Cell::I(Some(b.allocated_count)),
        Cell::I(Some(b.processes_read_count)),
        Cell::I(Some(b.first_ts_ms)),
        Cell::I(Some(b.last_ts_ms)),
        Cell::I(Some(b.sampled_ms)),
    ];
    cells.extend(b.quality.iter().map(|n| Cell::I(Some(*n))));
    for st in &b.signals {
        cells.extend([Cell::I(Some(st.count)), Cell::F(Some(st.sum)), Cell::F(st.min), Cell::F(st.max)]);
    }
    cells
}

/// The rollup columns counting samples per data-quality flag (`q_<flag>`), in
/// [`fleetlens_core::QualityFlag::ALL`] order.
pub(crate) fn quality_columns() -> Vec<String> {
    fleetlens_core::QualityFlag::ALL.iter().map(|f| format!("q_{}", f.as_str())).collect()
}

/// A [`crate::BucketCredit`] from a row of `gpu_id, bucket_ms` and then the credit columns in
/// order, read by position: reports read hundreds of thousands of these rows.
pub(crate) fn bucket_credit_from_row<R>(row: &R) -> Result<crate::BucketCredit, sqlx::Error>
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    i64: sqlx::Type<R::Database> + for<'r> sqlx::Decode<'r, R::Database>,
    f64: sqlx::Type<R::Database> + for<'r> sqlx::Decode<'r, R::Database>,
{
    let mut cells = [0.0; fleetlens_core::CREDIT_COLUMNS];
    for (i, cell) in cells.iter_mut().enumerate() {
        *cell = row.try_get(2 + i)?;
    }
    Ok(crate::BucketCredit {
        gpu_id: fleetlens_core::GpuId(row.try_get(0)?),
        bucket_ms: row.try_get(1)?,
        credit: fleetlens_core::Credit::from_cells(&cells),
    })
}

/// Column list of a stored minute with its credit, read back by [`merged_from_row`]: the key,
/// the rollup and the credit, in that order.
pub(crate) fn merged_returning() -> &'static str {
    static LIST: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let mut cols = vec!["gpu_id".to_string(), "bucket_ms".to_string()];
        cols.extend(rollup_columns());
        cols.extend(fleetlens_core::Credit::column_names());
        cols.join(", ")
    });
    LIST.as_str()
}

/// A stored minute and its credit from a row of [`merged_returning`], read by position: a
/// lookup by name hashes the name per cell.
pub(crate) fn merged_from_row<R>(row: &R) -> Result<(RollupBucket, fleetlens_core::Credit), sqlx::Error>
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    i64: sqlx::Type<R::Database> + for<'r> sqlx::Decode<'r, R::Database>,
    f64: sqlx::Type<R::Database> + for<'r> sqlx::Decode<'r, R::Database>,
{
    let mut b = RollupBucket {
        gpu_id: fleetlens_core::GpuId(row.try_get(0)?),
        bucket_ms: row.try_get(1)?,
        sample_count: row.try_get(2)?,
        allocated_count: row.try_get(3)?,
        processes_read_count: row.try_get(4)?,
        first_ts_ms: row.try_get(5)?,
        last_ts_ms: row.try_get(6)?,
        sampled_ms: row.try_get(7)?,
        ..Default::default()
    };
    let mut at = 8;
    for n in b.quality.iter_mut() {
        *n = row.try_get(at)?;
        at += 1;
    }
    for stats in b.signals.iter_mut() {
        *stats = SignalStats {
            count: row.try_get(at)?,
            sum: row.try_get(at + 1)?,
            min: row.try_get(at + 2)?,
            max: row.try_get(at + 3)?,
        };
        at += 4;
    }
    let mut cells = [0.0; fleetlens_core::CREDIT_COLUMNS];
    for cell in cells.iter_mut() {
        *cell = row.try_get(at)?;
        at += 1;
    }
    Ok((b, fleetlens_core::Credit::from_cells(&cells)))
}

/// [`merged_returning`] and the minute's state: a whole `rollups_1m` row, read back by
/// [`stored_minute_from_row`].
pub(crate) fn minute_returning() -> &'static str {
    static LIST: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| format!("{}, state", merged_returning()));
    LIST.as_str()
}

/// A whole minute row of [`minute_returning`].
pub(crate) fn stored_minute_from_row<R>(row: &R) -> Result<crate::blocks::minutes::StoredMinute, sqlx::Error>
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    i64: sqlx::Type<R::Database> + for<'r> sqlx::Decode<'r, R::Database>,
    f64: sqlx::Type<R::Database> + for<'r> sqlx::Decode<'r, R::Database>,
    String: sqlx::Type<R::Database> + for<'r> sqlx::Decode<'r, R::Database>,
{
    let (bucket, credit) = merged_from_row(row)?;
    let state = row.try_get(2 + ROLLUP_HEAD_AND_STATS + fleetlens_core::CREDIT_COLUMNS)?;
    Ok(crate::blocks::minutes::StoredMinute { bucket, state, credit })
}

/// The columns of [`rollup_columns`]: six counts and times, the quality counts, four
/// statistics per signal.
const ROLLUP_HEAD_AND_STATS: usize = 6 + fleetlens_core::QUALITY_COUNTS + 4 * ROLLUP_SIGNALS.len();

/// Build a rollup from a selected row, read column by column.
pub(crate) fn rollup_from_row<R>(row: &R, gpu_id: fleetlens_core::GpuId) -> Result<RollupBucket, sqlx::Error>
where
    R: sqlx::Row,
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    i64: sqlx::Type<R::Database> + for<'r> sqlx::Decode<'r, R::Database>,
    f64: sqlx::Type<R::Database> + for<'r> sqlx::Decode<'r, R::Database>,
{
    let mut b = RollupBucket {
        gpu_id,
        bucket_ms: row.try_get("bucket_ms")?,
        sample_count: row.try_get("sample_count")?,
        allocated_count: row.try_get("allocated_count")?,
        processes_read_count: row.try_get("processes_read_count")?,
        first_ts_ms: row.try_get("first_ts_ms")?,
        last_ts_ms: row.try_get("last_ts_ms")?,
        sampled_ms: row.try_get("sampled_ms")?,
        ..Default::default()
    };
    static QUALITY: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(quality_columns);
    for (n, col) in b.quality.iter_mut().zip(QUALITY.iter()) {
        *n = row.try_get(col.as_str())?;
    }
    // Column names built once: every ingest reads its merged rollup rows back.
    static NAMES: std::sync::LazyLock<Vec<[String; 4]>> = std::sync::LazyLock::new(|| {
        ROLLUP_SIGNALS
            .iter()
            .map(|s| [format!("{s}_count"), format!("{s}_sum"), format!("{s}_min"), format!("{s}_max")])
            .collect()
    });
    for (stats, [count, sum, min, max]) in b.signals.iter_mut().zip(NAMES.iter()) {
        *stats = SignalStats {
            count: row.try_get(count.as_str())?,
            sum: row.try_get(sum.as_str())?,
            min: row.try_get(min.as_str())?,
            max: row.try_get(max.as_str())?,
        };
    }
    Ok(b)
}

/// Identity of each distinct GPU in a batch: newest identity fields, time span.
pub(crate) struct GpuUpsert<'a> {
    pub uuid: &'a str,
    pub gpu_index: Option<i64>,
    pub name: Option<&'a str>,
    pub mem_total_bytes: Option<i64>,
    pub power_limit_w: Option<f64>,
    pub first_ms: i64,
    pub last_ms: i64,
    /// `last_ms` when the batch's newest sample of the GPU arrived live (see
    /// [`crate::live_since`]), else 0: a back-fill.
    pub live_ms: i64,
}

/// How an upsert of a batch's GPU rows counts in `gpus.ingest_seq` (`crate::GpuWritten`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SeqStep {
    /// The batch's own transaction: one more (a new row starts at 0, the column's default).
    Batch,
    /// PostgreSQL's registration ahead of the batch (the quota check): no batch is written by
    /// it, so it leaves the number as it is and a new row starts at -1, for the batch's own
    /// upsert to make 0.
    Registration,
}

impl SeqStep {
    /// The number a row this upsert inserts starts at.
    pub(crate) fn new_row(self) -> i64 {
        match self {
            SeqStep::Batch => 0,
            SeqStep::Registration => -1,
        }
    }
}

/// The end of the `INSERT INTO gpus` of a batch's GPUs (after the values), returning
/// `id, uuid, ingest_seq`. A back-filled (older) batch must not overwrite the newer identity of
/// a GPU. `least` / `greatest`: the database's two-argument minimum and maximum (`min` / `max`
/// on SQLite, `LEAST` / `GREATEST` on PostgreSQL).
pub(crate) fn gpu_upsert_tail(least: &str, greatest: &str, step: SeqStep) -> String {
    let seq = match step {
        SeqStep::Batch => "gpus.ingest_seq + 1",
        SeqStep::Registration => "gpus.ingest_seq",
    };
    format!(
        " ON CONFLICT (org_id, uuid) DO UPDATE SET \
         host = CASE WHEN excluded.last_seen_ms >= gpus.last_seen_ms THEN excluded.host ELSE gpus.host END, \
         gpu_index = CASE WHEN excluded.last_seen_ms >= gpus.last_seen_ms THEN coalesce(excluded.gpu_index, gpus.gpu_index) ELSE gpus.gpu_index END, \
         name = coalesce(gpus.name, excluded.name), \
         mem_total_bytes = coalesce(excluded.mem_total_bytes, gpus.mem_total_bytes), \
         power_limit_w = CASE WHEN excluded.last_seen_ms >= gpus.last_seen_ms THEN coalesce(excluded.power_limit_w, gpus.power_limit_w) ELSE gpus.power_limit_w END, \
         first_seen_ms = {least}(gpus.first_seen_ms, excluded.first_seen_ms), \
         last_seen_ms = {greatest}(gpus.last_seen_ms, excluded.last_seen_ms), \
         last_live_ms = {greatest}(gpus.last_live_ms, excluded.last_live_ms), \
         ingest_seq = {seq} \
         RETURNING id, uuid, ingest_seq"
    )
}

/// One entry per distinct uuid, sorted by uuid (a fixed lock order across transactions).
pub(crate) fn gpu_upserts(samples: &[Sample]) -> Vec<GpuUpsert<'_>> {
    let mut by_uuid: std::collections::BTreeMap<&str, GpuUpsert<'_>> = Default::default();
    for s in samples {
        let e = by_uuid.entry(s.uuid.as_str()).or_insert(GpuUpsert {
            uuid: &s.uuid,
            gpu_index: None,
            name: None,
            mem_total_bytes: None,
            power_limit_w: None,
            first_ms: s.ts_ms,
            last_ms: s.ts_ms,
            live_ms: 0,
        });
        e.first_ms = e.first_ms.min(s.ts_ms);
        if s.ts_ms >= e.last_ms {
            e.last_ms = s.ts_ms;
        }
        // Identity from the newest sample that has it.
        if s.ts_ms >= e.last_ms || e.name.is_none() {
            e.gpu_index = s.gpu_index.map(i64::from).or(e.gpu_index);
            e.name = s.name.as_deref().or(e.name);
            e.mem_total_bytes = s.mem_total_bytes.or(e.mem_total_bytes);
            e.power_limit_w = s.power_limit_w.or(e.power_limit_w);
        }
    }
    let live_from = crate::live_since(std::time::SystemTime::now());
    by_uuid
        .into_values()
        .map(|g| GpuUpsert { live_ms: if g.last_ms >= live_from { g.last_ms } else { 0 }, ..g })
        .collect()
}
