//! New samples of many GPUs in one read: the alert engine's feed. Reading each GPU's new
//! samples with a query of its own costs a round trip per GPU per evaluation (at 2,000 GPUs
//! and a cycle per ingest, thousands of queries a second); here the GPUs and their positions
//! go in as one list and the samples come back in one result.

use async_trait::async_trait;
use fleetlens_core::{GpuId, Sample};

use crate::Result;

/// GPUs per query (bounds the size of one statement's sort).
const CHUNK: usize = 2_000;

#[async_trait]
pub trait SampleFeed: Send + Sync {
    /// For each `(gpu_id, from_ms)`, the GPU's samples with `ts_ms >= from_ms`, as
    /// `(gpu_id, sample)` ordered by GPU then time; at most `limit` in all (a GPU may be cut
    /// short: read again from its last sample).
    async fn samples_since(&self, positions: &[(GpuId, i64)], limit: u32) -> Result<Vec<(GpuId, Sample)>>;
}

#[derive(Debug, sqlx::FromRow)]
struct FeedRow {
    gpu_id: GpuId,
    uuid: String,
    gpu_index: Option<i64>,
    name: Option<String>,
    #[sqlx(flatten)]
    row: crate::columns::SampleRow,
}

impl FeedRow {
    fn into_pair(self) -> (GpuId, Sample) {
        let index = self.gpu_index.and_then(|i| u32::try_from(i).ok());
        (self.gpu_id, self.row.values.into_sample(self.row.ts_ms, &self.uuid, index, self.name.as_deref()))
    }
}

fn select(processes_expr: &str) -> String {
    format!(
        "SELECT s.gpu_id, g.uuid, g.gpu_index, g.name, s.ts_ms, {}",
        crate::columns::sample_select_list("s", processes_expr)
    )
}

#[async_trait]
impl SampleFeed for crate::sqlite::SqliteStore {
    async fn samples_since(&self, positions: &[(GpuId, i64)], limit: u32) -> Result<Vec<(GpuId, Sample)>> {
        // The positions go in as one JSON text: one SQL text whatever the number of GPUs, so
        // the connection's statement cache holds one prepared statement, not one per count.
        let sql = format!(
            "WITH c(gpu_id, from_ms) AS (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') \
             FROM json_each(?)) {} FROM c JOIN samples s ON s.gpu_id = c.gpu_id AND s.ts_ms >= c.from_ms \
             JOIN gpus g ON g.id = s.gpu_id ORDER BY s.gpu_id, s.ts_ms LIMIT ?",
            select("s.processes")
        );
        let mut out = Vec::new();
        for chunk in positions.chunks(CHUNK) {
            let left = i64::from(limit) - out.len() as i64;
            if left <= 0 {
                break;
            }
            // A GPU id serialises as its integer.
            let json = serde_json::to_string(chunk).expect("pairs of integers serialise");
            let rows = sqlx::query_as::<_, FeedRow>(&sql).bind(json).bind(left).fetch_all(self.pool()).await?;
            out.extend(rows.into_iter().map(FeedRow::into_pair));
        }
        Ok(out)
    }
}

#[async_trait]
impl SampleFeed for crate::postgres::PgStore {
    async fn samples_since(&self, positions: &[(GpuId, i64)], limit: u32) -> Result<Vec<(GpuId, Sample)>> {
        let mut out = Vec::new();
        for chunk in positions.chunks(CHUNK) {
            let left = i64::from(limit) - out.len() as i64;
            if left <= 0 {
                break;
            }
            // LATERAL makes each GPU's read an index range scan from its position. With a plain
            // join the planner (generic plans count 10 rows for an UNNEST) chose a merge join
            // on gpu_id alone, filtering ts_ms row by row: every cycle read the whole samples
            // table, 1.5 s at 350k rows five minutes into a 2,000-GPU soak, and growing.
            let sql = format!(
                "{} FROM UNNEST($1::bigint[], $2::bigint[]) AS c(gpu_id, from_ms) \
                 JOIN gpus g ON g.id = c.gpu_id \
                 CROSS JOIN LATERAL (SELECT * FROM open_samples(c.gpu_id, c.from_ms, 9223372036854775807) \
                 ORDER BY ts_ms LIMIT $3) s \
                 ORDER BY c.gpu_id, s.ts_ms LIMIT $3",
                select("s.processes::text")
            );
            let (gpus, froms): (Vec<i64>, Vec<i64>) = chunk.iter().map(|&(gpu, from)| (gpu.get(), from)).unzip();
            let rows =
                sqlx::query_as::<_, FeedRow>(&sql).bind(gpus).bind(froms).bind(left).fetch_all(self.pool()).await?;
            out.extend(rows.into_iter().map(FeedRow::into_pair));
        }
        Ok(out)
    }
}
