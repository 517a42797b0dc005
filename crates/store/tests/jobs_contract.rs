//! The contract of reported jobs (throughput, for MFU): every test runs against SQLite and
//! against PostgreSQL.

use fleetlens_core::{JobId, JobThroughput, Precision};
use fleetlens_store::{DEFAULT_ORG, JobRecord};
use fleetlens_tests::Backend;

mod common;
use common::open;

fleetlens_tests::for_each_backend!(
    jobs_read_back_with_their_precision_as_stored_text,
    an_unreadable_stored_job_reads_as_an_error,
);

const T0: i64 = 1_790_000_000_000;

fn job(name: &str, precision: Precision, from_ms: i64) -> JobRecord {
    JobRecord {
        id: JobId::default(),
        report: JobThroughput {
            name: name.into(),
            gpu_uuids: vec!["GPU-a".into(), "GPU-b".into()],
            from_ms,
            to_ms: from_ms + 60_000,
            precision,
            achieved_flops_per_s: 4.0e14,
        },
        created_ms: T0,
    }
}

/// Statements run straight on the database, as an older server or a hand edit would.
async fn execute(backend: Backend, url: &str, sql: &[&str]) {
    match backend {
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(url).await.unwrap();
            for q in sql {
                sqlx::query(q).execute(&pool).await.unwrap();
            }
        }
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(url).await.unwrap();
            for q in sql {
                sqlx::query(q).execute(&pool).await.unwrap();
            }
        }
    }
}

/// Every precision (fp16 kept apart from bf16) round-trips, stored as the lower-case name the
/// jobs route wrote before the column was typed: rows written then read back.
async fn jobs_read_back_with_their_precision_as_stored_text(backend: Backend) {
    let (db, store) = open(backend).await;
    let mut want = Vec::new();
    for (i, precision) in Precision::ALL.into_iter().enumerate() {
        let mut j = job(&format!("job-{i}"), precision, T0 + i as i64 * 60_000);
        j.id = store.insert_job(DEFAULT_ORG, &j).await.unwrap();
        want.push(j);
    }
    assert_eq!(store.jobs(DEFAULT_ORG, T0, T0 + 3_600_000).await.unwrap(), want);

    // The stored text is the name (copied into `name` to read it).
    execute(backend, &db.url, &["UPDATE jobs SET name = precision"]).await;
    let stored: Vec<(String, Precision)> = store
        .jobs(DEFAULT_ORG, T0, T0 + 3_600_000)
        .await
        .unwrap()
        .into_iter()
        .map(|j| (j.report.name, j.report.precision))
        .collect();
    assert_eq!(stored, Precision::ALL.map(|p| (p.as_str().to_string(), p)));

    // A row as an older release wrote it (the route's lower-cased text) reads back.
    let older = format!(
        "INSERT INTO jobs (org_id, name, gpu_uuids, from_ms, to_ms, precision, achieved_flops_per_s, created_ms) \
         VALUES ({}, 'older', '[\"GPU-a\"]', {T0}, {}, 'fp16', 1.0e14, {T0})",
        DEFAULT_ORG.get(),
        T0 + 60_000
    );
    execute(backend, &db.url, &["DELETE FROM jobs", &older]).await;
    let read = store.jobs(DEFAULT_ORG, T0, T0 + 60_000).await.unwrap();
    assert_eq!(
        read.iter()
            .map(|j| (j.report.name.as_str(), j.report.gpu_uuids.clone(), j.report.precision))
            .collect::<Vec<_>>(),
        [("older", vec!["GPU-a".to_string()], Precision::Fp16)]
    );
}

/// A stored precision that is no name, or a GPU list that is not JSON (written by hand), reads
/// back as an error naming what is wrong, never as another precision or a job on no GPU.
async fn an_unreadable_stored_job_reads_as_an_error(backend: Backend) {
    let (db, store) = open(backend).await;
    store.insert_job(DEFAULT_ORG, &job("a", Precision::Bf16, T0)).await.unwrap();
    execute(backend, &db.url, &["UPDATE jobs SET precision = 'fp9'"]).await;
    let e = store.jobs(DEFAULT_ORG, T0, T0 + 60_000).await.unwrap_err().to_string();
    assert!(e.contains("fp9") && e.contains("fp64, fp32, tf32, bf16, fp16, fp8, fp4"), "{e}");

    execute(backend, &db.url, &["UPDATE jobs SET precision = 'bf16', gpu_uuids = 'GPU-a,GPU-b'"]).await;
    let e = store.jobs(DEFAULT_ORG, T0, T0 + 60_000).await.unwrap_err().to_string();
    assert!(e.contains("gpu_uuids"), "{e}");
}
