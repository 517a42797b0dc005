//! The part of [`Store`](crate::Store) that is the same SQL on both databases, written once
//! ([`impl_store`], see [`crate::dialect`]). What only one database does (SQLite's single
//! writer and its group commit, PostgreSQL's `COPY`, advisory locks, `LISTEN`/`NOTIFY`,
//! vacuuming, retention) is passed in by the backend, as the methods of its own.

/// `impl Store for $store` with its data-path parts (`GpuStore`, `SampleStore`, `RollupStore`),
/// in a module `shared` of the invoking module. The invoking module provides `mod close` (its
/// `impl_rollup_close!`), the fields `pool` and `classifier` of `$store`, an inherent `async fn
/// whole_credit_rows(&self, sql: &str, org: OrgId, nested_loop: bool) ->
/// Result<Vec<BucketCredit>>` (one statement of [`crate::whole_credit_sql`], which PostgreSQL
/// plans with hints) and an inherent `async fn ingest_batch` with the arguments of
/// [`SampleStore::ingest_with`](crate::SampleStore::ingest_with) (each database writes a batch
/// its own way; an empty batch never reaches it). `$dialect` names the
/// database's module in both [`crate::dialect`] and [`crate::blocks`]. The braces hold the
/// backend's own `Store` methods; they see the invoking module's names (`use super::*`).
macro_rules! impl_store {
    ($store:ident, $dialect:ident, { $($own:tt)* }) => {
    mod shared {
        use super::*;
        use $crate::dialect::$dialect::{
            CLOSE_LOCK, NEWEST_SAMPLE_JOIN, OPEN_COUNT_SQL, PROCESSES_TEXT, begin, open_samples, open_samples_between, q,
        };
        use $crate::rollup_close::{self as rc, BindGpus as _, PendingScope, minute_range};

        /// The stored rows alone, which the `Store` reads complete with the open minutes.
        impl $store {
            /// The rollup job: the minutes marked before `cutoff_ms`, one transaction per chunk
            /// of GPUs (a minute, its hour and day and its mark always go together).
            pub(super) async fn close_before(&self, cutoff_ms: i64) -> $crate::Result<u64> {
                let mut written = 0;
                for (gpu_lo, gpu_hi) in close::close_chunks(&self.pool, cutoff_ms).await? {
                    let mut tx = begin(&self.pool).await?;
                    let scope = PendingScope::ClosedBefore { cutoff_ms, gpu_lo, gpu_hi };
                    written += close::close_in(&mut tx, scope, CLOSE_LOCK, self.classifier.as_ref()).await?;
                    tx.commit().await?;
                }
                Ok(written)
            }

            /// A read of stored rows with the open minutes of `scope` that complete it
            /// (`close::with_open` on this store's pool and classifier).
            async fn with_open<T, Fut>(
                &self,
                scope: PendingScope<'_>,
                read: impl Fn() -> Fut,
            ) -> $crate::Result<(T, Vec<rc::OpenMinute>)>
            where
                Fut: std::future::Future<Output = $crate::Result<T>>,
            {
                close::with_open(&self.pool, scope, self.classifier.as_ref(), read).await
            }

            /// The newest sample of GPUs whose newest hour is sealed (no open row holds it).
            async fn fill_sealed_latest(&self, records: &mut [$crate::GpuRecord]) -> $crate::Result<()> {
                let missing = $crate::blocks::missing_latest(records);
                if !missing.is_empty() {
                    let latest = $crate::blocks::$dialect::latest_blocks(&self.pool, &missing).await?;
                    $crate::blocks::fill_latest(records, latest)?;
                }
                Ok(())
            }

            /// What [`SampleStore::samples`](crate::SampleStore::samples) reads: the GPU's
            /// identity, its open rows (with it) and its sealed blocks' payloads in the range;
            /// `None` for a GPU of another organisation (one without samples).
            async fn samples_stored(
                &self,
                org: $crate::OrgId,
                gpu_id: fleetlens_core::GpuId,
                from_ms: i64,
                to_ms: i64,
                limit: u32,
            ) -> $crate::Result<Option<$crate::blocks::StoredSamples>> {
                let ident: Option<(String, Option<i64>, Option<String>)> =
                    sqlx::query_as(&q("SELECT uuid, gpu_index, name FROM gpus WHERE org_id = ? AND id = ?"))
                        .bind(org)
                        .bind(gpu_id)
                        .fetch_optional(&self.pool)
                        .await?;
                let Some((uuid, index, name)) = ident else { return Ok(None) };
                let sql = format!(
                    "SELECT s.ts_ms, {} FROM {} s ORDER BY s.ts_ms LIMIT ?",
                    $crate::columns::sample_select_list("s", PROCESSES_TEXT),
                    open_samples("?", "?", "?")
                );
                let rows: Vec<$crate::columns::SampleRow> = sqlx::query_as(&q(&sql))
                    .bind(gpu_id)
                    .bind(from_ms)
                    .bind(to_ms)
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await?;
                let index = index.and_then(|i| u32::try_from(i).ok());
                let open =
                    rows.into_iter().map(|r| r.values.into_sample(r.ts_ms, &uuid, index, name.as_deref())).collect();
                let payloads = $crate::blocks::$dialect::payloads(&self.pool, gpu_id, from_ms, to_ms).await?;
                Ok(Some($crate::blocks::StoredSamples { uuid, index, name, open, payloads }))
            }

            /// Minutes packed into blocks (closed hours) with `from_ms <= bucket_ms < to_ms`, of
            /// the GPUs `r` (rollup_blocks) and `g` (gpus) where `condition` holds (bound to
            /// `keys`), ordered by GPU then time. Read after the rows: an hour packed in between
            /// is then read twice (and the row wins), never missed.
            async fn packed_minutes(
                &self,
                condition: &str,
                keys: &[i64],
                from_ms: i64,
                to_ms: i64,
            ) -> $crate::Result<Vec<$crate::blocks::minutes::StoredMinute>> {
                let sql = format!(
                    "SELECT r.gpu_id, r.payload FROM rollup_blocks r JOIN gpus g ON g.id = r.gpu_id \
                     WHERE {condition} AND r.start_ms > ? AND r.start_ms < ? ORDER BY r.gpu_id, r.start_ms"
                );
                let sql = q(&sql);
                let mut query = sqlx::query_as::<_, (fleetlens_core::GpuId, Vec<u8>)>(&sql);
                for &key in keys {
                    query = query.bind(key);
                }
                let blocks = query.bind(from_ms - $crate::BLOCK_SPAN_MS).bind(to_ms).fetch_all(&self.pool).await?;
                let mut out = Vec::new();
                for (gpu_id, payload) in blocks {
                    out.extend(
                        $crate::blocks::minutes::decode(gpu_id, &payload)?
                            .into_iter()
                            .filter(|m| m.bucket.bucket_ms >= from_ms && m.bucket.bucket_ms < to_ms),
                    );
                }
                Ok(out)
            }

            /// The newest minutes of GPUs of `org` (all, or those of `gpu_ids`) that `latest`
            /// lacks because their hour was packed (a GPU silent since an hour before this one).
            async fn fill_packed_latest(
                &self,
                org: $crate::OrgId,
                gpu_ids: Option<&[fleetlens_core::GpuId]>,
                latest: &mut Vec<$crate::LatestMinute>,
            ) -> $crate::Result<()> {
                let only = rc::only_gpus("g.id", gpu_ids);
                let sql = format!(
                    "SELECT g.id, g.last_seen_ms, r.payload FROM gpus g JOIN rollup_blocks r ON r.gpu_id = g.id \
                     AND r.start_ms = (g.last_seen_ms / {span}) * {span} WHERE g.org_id = ? AND g.last_seen_ms < ?{only}",
                    span = $crate::BLOCK_SPAN_MS
                );
                let sql = q(&sql);
                let query = sqlx::query_as::<_, (fleetlens_core::GpuId, i64, Vec<u8>)>(&sql)
                    .bind(org)
                    .bind($crate::blocks::span_start(rc::wall_clock_ms()))
                    .bind_gpus(gpu_ids);
                let have: std::collections::HashSet<fleetlens_core::GpuId> = latest.iter().map(|m| m.gpu_id).collect();
                let mut added = false;
                for (gpu_id, last_seen_ms, payload) in query.fetch_all(&self.pool).await? {
                    if have.contains(&gpu_id) {
                        continue;
                    }
                    let minute = fleetlens_core::Resolution::Minute.bucket_start(last_seen_ms);
                    let found = $crate::blocks::minutes::decode(gpu_id, &payload)?.into_iter().find(|m| m.bucket.bucket_ms == minute);
                    if let Some(m) = found {
                        added = true;
                        latest.push($crate::LatestMinute {
                            gpu_id,
                            bucket_ms: m.bucket.bucket_ms,
                            state: m.state,
                            sample_count: m.bucket.sample_count,
                            first_ts_ms: m.bucket.first_ts_ms,
                            last_ts_ms: m.bucket.last_ts_ms,
                        });
                    }
                }
                if added {
                    latest.sort_by_key(|m| m.gpu_id);
                }
                Ok(())
            }

            /// Rollup rows with `from_ms <= bucket_ms < to_ms` of the GPUs `r` (rollups) and `g`
            /// (gpus) where `condition` holds (bound to `keys`), ordered by GPU then time, with the
            /// open minutes of `scope(first minute, end)` in.
            async fn rollups_where<'s>(
                &self,
                condition: &str,
                keys: &[i64],
                res: $crate::Resolution,
                from_ms: i64,
                to_ms: i64,
                scope: impl FnOnce(i64, i64) -> PendingScope<'s>,
            ) -> $crate::Result<Vec<$crate::RollupBucket>> {
                use sqlx::Row as _;
                let sql = format!(
                    "SELECT r.* FROM {} r JOIN gpus g ON g.id = r.gpu_id \
                     WHERE {condition} AND r.bucket_ms >= ? AND r.bucket_ms < ? ORDER BY r.gpu_id, r.bucket_ms",
                    $crate::rollup_table(res)
                );
                let sql = q(&sql);
                let read = || async {
                    let mut query = sqlx::query(&sql);
                    for &key in keys {
                        query = query.bind(key);
                    }
                    let rows = query.bind(from_ms).bind(to_ms).fetch_all(&self.pool).await?;
                    let rows: Vec<$crate::RollupBucket> = rows
                        .iter()
                        .map(|r| $crate::columns::rollup_from_row(r, fleetlens_core::GpuId(r.try_get("gpu_id")?)))
                        .collect::<Result<_, sqlx::Error>>()?;
                    if res != $crate::Resolution::Minute {
                        return Ok(rows);
                    }
                    let packed = self.packed_minutes(condition, keys, from_ms, to_ms).await?;
                    Ok($crate::blocks::rows_over_packed(packed.into_iter().map(|m| m.bucket), rows, |b| (b.gpu_id, b.bucket_ms)))
                };
                let (lo, hi) = minute_range(res, from_ms, to_ms);
                let (stored, open) = self.with_open(scope(lo, hi), read).await?;
                Ok(rc::overlay_rollups(stored, res, &open))
            }

            async fn stored_credits(
                &self,
                org: $crate::OrgId,
                gpus: Option<&[fleetlens_core::GpuId]>,
                res: $crate::Resolution,
                from_ms: i64,
                to_ms: i64,
            ) -> $crate::Result<Vec<$crate::BucketCredit>> {
                let columns = fleetlens_core::Credit::column_names();
                let columns = columns.iter().map(|c| format!("r.{c}"));
                let only = rc::only_gpus("r.gpu_id", gpus);
                let sql = format!(
                    "SELECT r.gpu_id, r.bucket_ms, {} FROM {} r JOIN gpus g ON g.id = r.gpu_id \
                     WHERE g.org_id = ? AND r.bucket_ms >= ? AND r.bucket_ms < ?{only}",
                    columns.collect::<Vec<_>>().join(", "),
                    $crate::rollup_table(res)
                );
                let sql = q(&sql);
                let query = sqlx::query(&sql).bind(org).bind(from_ms).bind(to_ms).bind_gpus(gpus);
                let rows = query.fetch_all(&self.pool).await?;
                let rows = rows.iter().map($crate::columns::bucket_credit_from_row).collect::<Result<Vec<_>, _>>()?;
                if res != $crate::Resolution::Minute {
                    return Ok(rows);
                }
                let keys: Vec<i64> = std::iter::once(org.get()).chain(gpus.unwrap_or_default().iter().map(|id| id.get())).collect();
                let packed = self.packed_minutes(&format!("g.org_id = ?{only}"), &keys, from_ms, to_ms).await?;
                let packed = packed.into_iter().map(|m| $crate::BucketCredit {
                    gpu_id: m.bucket.gpu_id,
                    bucket_ms: m.bucket.bucket_ms,
                    credit: m.credit,
                });
                Ok($crate::blocks::rows_over_packed(packed, rows, |c| (c.gpu_id, c.bucket_ms)))
            }

            async fn stored_hour_credit_split(
                &self,
                org: $crate::OrgId,
                from_ms: i64,
                end_ms: i64,
                first_whole_ms: i64,
                last_whole_ms: i64,
            ) -> $crate::Result<$crate::HourCreditSplit> {
                const H: i64 = 3_600_000;
                let floor_from = from_ms.div_euclid(H) * H;
                let last_start = last_whole_ms - H;
                if first_whole_ms > last_start {
                    // No whole hour inside the period: every hour is partial.
                    let partial = self.stored_credits(org, None, $crate::Resolution::Hour, floor_from, end_ms).await?;
                    return Ok($crate::HourCreditSplit { whole: Vec::new(), partial });
                }
                let (whole, partial) = $crate::hour_credit_split_sql(first_whole_ms, last_start);
                // Four independent statements at once, each on its own pooled connection (its
                // own SQLite thread, or PostgreSQL backend process).
                let partial = async {
                    let rows = sqlx::query(&q(&partial))
                        .bind(org)
                        .bind(floor_from)
                        .bind(first_whole_ms)
                        .bind(org)
                        .bind(last_start)
                        .bind(end_ms)
                        .bind(org)
                        .bind(first_whole_ms)
                        .bind(last_start)
                        .bind(org)
                        .bind(first_whole_ms)
                        .bind(last_start)
                        .fetch_all(&self.pool)
                        .await?;
                    Ok::<_, $crate::StoreError>(
                        rows.iter().map($crate::columns::bucket_credit_from_row).collect::<Result<Vec<_>, _>>()?,
                    )
                };
                let (days_sql, before_sql, after_sql) = (q(&whole.days), q(&whole.hours_before), q(&whole.hours_after));
                let (days, before, after, partial) = tokio::try_join!(
                    self.whole_credit_rows(&days_sql, org, false),
                    self.whole_credit_rows(&before_sql, org, true),
                    self.whole_credit_rows(&after_sql, org, true),
                    partial
                )?;
                let whole = $crate::sum_per_gpu(days.into_iter().chain(before).chain(after).collect());
                Ok($crate::HourCreditSplit { whole, partial })
            }
        }

        #[async_trait::async_trait]
        impl $crate::GpuStore for $store {
            async fn move_gpu(&self, org: $crate::OrgId, uuid: &str, host: &str) -> $crate::Result<bool> {
                let done = sqlx::query(&q("UPDATE gpus SET host = ? WHERE org_id = ? AND uuid = ?"))
                    .bind(host)
                    .bind(org)
                    .bind(uuid)
                    .execute(&self.pool)
                    .await?
                    .rows_affected();
                Ok(done > 0)
            }

            async fn gpu_identities(&self, org: $crate::OrgId) -> $crate::Result<Vec<$crate::GpuRecord>> {
                let sql = format!(
                    "SELECT {} FROM gpus g WHERE g.org_id = ? ORDER BY g.host, g.gpu_index, g.uuid",
                    $crate::GPU_RECORD_COLUMNS
                );
                Ok(sqlx::query_as(&q(&sql)).bind(org).fetch_all(&self.pool).await?)
            }

            async fn gpu_identity(&self, org: $crate::OrgId, uuid: &str) -> $crate::Result<Option<$crate::GpuRecord>> {
                let sql = format!("SELECT {} FROM gpus g WHERE g.org_id = ? AND g.uuid = ?", $crate::GPU_RECORD_COLUMNS);
                Ok(sqlx::query_as(&q(&sql)).bind(org).bind(uuid).fetch_optional(&self.pool).await?)
            }

            async fn gpus(&self, org: $crate::OrgId) -> $crate::Result<Vec<$crate::GpuRecord>> {
                let sql = format!(
                    "{} WHERE g.org_id = ? ORDER BY g.host, g.gpu_index, g.uuid",
                    $crate::columns::gpu_select(PROCESSES_TEXT, NEWEST_SAMPLE_JOIN)
                );
                let rows: Vec<$crate::columns::GpuRow> = sqlx::query_as(&q(&sql)).bind(org).fetch_all(&self.pool).await?;
                let mut records: Vec<$crate::GpuRecord> = rows.into_iter().map($crate::columns::GpuRow::into_record).collect();
                self.fill_sealed_latest(&mut records).await?;
                Ok(records)
            }

            async fn gpu(&self, org: $crate::OrgId, uuid: &str) -> $crate::Result<Option<$crate::GpuRecord>> {
                let sql = format!("{} WHERE g.org_id = ? AND g.uuid = ?", $crate::columns::gpu_select(PROCESSES_TEXT, NEWEST_SAMPLE_JOIN));
                let row: Option<$crate::columns::GpuRow> =
                    sqlx::query_as(&q(&sql)).bind(org).bind(uuid).fetch_optional(&self.pool).await?;
                let mut records: Vec<$crate::GpuRecord> = row.into_iter().map($crate::columns::GpuRow::into_record).collect();
                self.fill_sealed_latest(&mut records).await?;
                Ok(records.pop())
            }
        }

        #[async_trait::async_trait]
        impl $crate::SampleStore for $store {
            async fn ingest_with(&self, batch: $crate::SampleBatch) -> $crate::Result<$crate::IngestOutcome> {
                if batch.samples.is_empty() {
                    return Ok($crate::IngestOutcome::default());
                }
                self.ingest_batch(batch).await
            }

            async fn latest_minutes(&self, org: $crate::OrgId) -> $crate::Result<Vec<$crate::LatestMinute>> {
                let sql = q(&rc::stored_latest_sql(None)).into_owned();
                let read = || async { Ok(sqlx::query_as(&sql).bind(org).fetch_all(&self.pool).await?) };
                let scope = PendingScope::Latest { org, gpus: None };
                let (stored, open) = self.with_open(scope, read).await?;
                let mut latest = rc::overlay_latest(stored, &open);
                self.fill_packed_latest(org, None, &mut latest).await?;
                Ok(latest)
            }

            async fn latest_minutes_of(
                &self,
                org: $crate::OrgId,
                gpu_ids: &[fleetlens_core::GpuId],
            ) -> $crate::Result<Vec<$crate::LatestMinute>> {
                let mut out = Vec::with_capacity(gpu_ids.len());
                for chunk in gpu_ids.chunks(rc::GPUS_PER_LATEST_READ) {
                    let sql = q(&rc::stored_latest_sql(Some(chunk.len()))).into_owned();
                    let read = || async {
                        let mut query = sqlx::query_as(&sql).bind(org);
                        for id in chunk {
                            query = query.bind(*id);
                        }
                        Ok(query.fetch_all(&self.pool).await?)
                    };
                    let scope = PendingScope::Latest { org, gpus: Some(chunk) };
                    let (stored, open) = self.with_open(scope, read).await?;
                    let mut latest = rc::overlay_latest(stored, &open);
                    self.fill_packed_latest(org, Some(chunk), &mut latest).await?;
                    out.extend(latest);
                }
                Ok(out)
            }

            async fn samples(
                &self,
                org: $crate::OrgId,
                gpu_id: fleetlens_core::GpuId,
                from_ms: i64,
                to_ms: i64,
                limit: u32,
            ) -> $crate::Result<Vec<fleetlens_core::Sample>> {
                let Some(stored) = self.samples_stored(org, gpu_id, from_ms, to_ms, limit).await? else {
                    return Ok(Vec::new());
                };
                let (uuid, index, name) = (stored.uuid.as_str(), stored.index, stored.name.as_deref());
                let sealed = $crate::blocks::decode_range(&stored.payloads, from_ms, to_ms)?;
                let sealed = sealed.into_iter().map(|s| $crate::blocks::with_identity(s, uuid, index, name)).collect();
                let mut merged = $crate::blocks::merge(sealed, stored.open);
                merged.truncate(limit as usize);
                Ok(merged)
            }

            async fn sample_table(
                &self,
                org: $crate::OrgId,
                gpu_id: fleetlens_core::GpuId,
                from_ms: i64,
                to_ms: i64,
                limit: u32,
            ) -> $crate::Result<fleetlens_core::SampleTable> {
                let Some(stored) = self.samples_stored(org, gpu_id, from_ms, to_ms, limit).await? else {
                    return Ok(fleetlens_core::SampleTable::default());
                };
                let mut table = $crate::blocks::decode_table_range(&stored.payloads, from_ms, to_ms)?;
                $crate::blocks::merge_into_table(&mut table, stored.open);
                table.keep(0..limit as usize);
                Ok(table)
            }

            async fn sample_count(&self) -> $crate::Result<u64> {
                let n: i64 = sqlx::query_scalar(OPEN_COUNT_SQL).fetch_one(&self.pool).await?;
                Ok(n as u64 + $crate::blocks::$dialect::count(&self.pool).await?)
            }
        }

        #[async_trait::async_trait]
        impl $crate::RollupStore for $store {
            async fn rollups(
                &self,
                org: $crate::OrgId,
                gpu_id: fleetlens_core::GpuId,
                res: $crate::Resolution,
                from_ms: i64,
                to_ms: i64,
            ) -> $crate::Result<Vec<$crate::RollupBucket>> {
                let gpus = [gpu_id];
                let scope = |lo, hi| PendingScope::Org { org, gpus: Some(&gpus), from_ms: lo, to_ms: hi };
                self.rollups_where("g.org_id = ? AND r.gpu_id = ?", &[org.get(), gpu_id.get()], res, from_ms, to_ms, scope).await
            }

            async fn org_rollups(
                &self,
                org: $crate::OrgId,
                res: $crate::Resolution,
                from_ms: i64,
                to_ms: i64,
            ) -> $crate::Result<Vec<$crate::RollupBucket>> {
                let scope = |lo, hi| PendingScope::Org { org, gpus: None, from_ms: lo, to_ms: hi };
                self.rollups_where("g.org_id = ?", &[org.get()], res, from_ms, to_ms, scope).await
            }

            async fn credits(
                &self,
                org: $crate::OrgId,
                gpus: Option<&[fleetlens_core::GpuId]>,
                res: $crate::Resolution,
                from_ms: i64,
                to_ms: i64,
            ) -> $crate::Result<Vec<$crate::BucketCredit>> {
                if gpus.is_some_and(|ids| ids.is_empty()) {
                    return Ok(Vec::new());
                }
                let read = || self.stored_credits(org, gpus, res, from_ms, to_ms);
                let (lo, hi) = minute_range(res, from_ms, to_ms);
                let scope = PendingScope::Org { org, gpus, from_ms: lo, to_ms: hi };
                let (stored, open) = self.with_open(scope, read).await?;
                Ok(rc::overlay_credits(stored, res, &open))
            }

            async fn org_hour_credit_split(
                &self,
                org: $crate::OrgId,
                from_ms: i64,
                end_ms: i64,
                first_whole_ms: i64,
                last_whole_ms: i64,
            ) -> $crate::Result<$crate::HourCreditSplit> {
                let read = || self.stored_hour_credit_split(org, from_ms, end_ms, first_whole_ms, last_whole_ms);
                let (lo, hi) = minute_range($crate::Resolution::Hour, from_ms.div_euclid(3_600_000) * 3_600_000, end_ms);
                let scope = PendingScope::Org { org, gpus: None, from_ms: lo, to_ms: hi };
                let (mut split, open) = self.with_open(scope, read).await?;
                if !open.is_empty() {
                    let spans = $crate::GpuStore::gpu_identities(self, org)
                        .await?
                        .into_iter()
                        .map(|g| (g.id, (g.info.first_seen_ms, g.info.last_seen_ms)))
                        .collect();
                    let period = rc::SplitPeriod { from_ms, end_ms, first_whole_ms, last_whole_ms };
                    rc::overlay_split(&mut split, &open, &spans, period);
                }
                Ok(split)
            }

            async fn org_peak_mem(&self, org: $crate::OrgId, from_ms: i64, to_ms: i64) -> $crate::Result<Vec<(fleetlens_core::GpuId, i64)>> {
                let sql = q("SELECT r.gpu_id, max(r.mem_used_bytes_max) FROM rollups_1h r JOIN gpus g ON g.id = r.gpu_id \
                     WHERE g.org_id = ? AND r.bucket_ms > ? - 3600000 AND r.bucket_ms < ? GROUP BY r.gpu_id");
                let read = || async {
                    let rows: Vec<(fleetlens_core::GpuId, Option<f64>)> =
                        sqlx::query_as(&sql).bind(org).bind(from_ms).bind(to_ms).fetch_all(&self.pool).await?;
                    Ok(rows.into_iter().filter_map(|(id, m)| m.map(|m| (id, m as i64))).collect())
                };
                let (lo, hi) = minute_range($crate::Resolution::Hour, from_ms - 3_600_000 + 1, to_ms);
                let scope = PendingScope::Org { org, gpus: None, from_ms: lo, to_ms: hi };
                let (stored, open) = self.with_open(scope, read).await?;
                Ok(rc::overlay_peak_mem(stored, &open))
            }

            async fn series(
                &self,
                org: $crate::OrgId,
                gpu_id: fleetlens_core::GpuId,
                res: $crate::Resolution,
                from_ms: i64,
                to_ms: i64,
            ) -> $crate::Result<Vec<$crate::SeriesRow>> {
                match res {
                    $crate::Resolution::Minute => {
                        // The rollup table has no org column: the GPU id counts only if it is the org's.
                        let sql = format!(
                            "{} WHERE gpu_id = (SELECT g.id FROM gpus g WHERE g.org_id = ? AND g.id = ?) \
                             AND bucket_ms >= ? AND bucket_ms < ? ORDER BY bucket_ms",
                            $crate::series_select(res)
                        );
                        let sql = q(&sql);
                        let read = || async {
                            let rows: Vec<$crate::SeriesRow> = sqlx::query_as(&sql)
                                .bind(org)
                                .bind(gpu_id)
                                .bind(from_ms)
                                .bind(to_ms)
                                .fetch_all(&self.pool)
                                .await?;
                            let packed = self
                                .packed_minutes("g.org_id = ? AND r.gpu_id = ?", &[org.get(), gpu_id.get()], from_ms, to_ms)
                                .await?;
                            let packed = packed.iter().map(|m| rc::series_row(&m.bucket, m.state.clone()));
                            Ok($crate::blocks::rows_over_packed(packed, rows, |r| r.bucket_ms))
                        };
                        let (lo, hi) = minute_range(res, from_ms, to_ms);
                        let scope = PendingScope::Org { org, gpus: Some(std::slice::from_ref(&gpu_id)), from_ms: lo, to_ms: hi };
                        let (stored, open) = self.with_open(scope, read).await?;
                        Ok(rc::overlay_minute_series(stored, &open))
                    }
                    // Hours from their rollups, with the open minutes in (the chart columns are theirs).
                    $crate::Resolution::Hour => Ok(self
                        .rollups(org, gpu_id, res, from_ms, to_ms)
                        .await?
                        .iter()
                        .map(|b| rc::series_row(b, None))
                        .collect()),
                }
            }

            async fn process_lists(
                &self,
                org: $crate::OrgId,
                gpus: Option<&[fleetlens_core::GpuId]>,
                from_ms: i64,
                to_ms: i64,
            ) -> $crate::Result<Vec<$crate::ProcessList>> {
                if gpus.is_some_and(|ids| ids.is_empty()) {
                    return Ok(Vec::new());
                }
                // Process lists rarely change within a minute: group identical ones (each sample
                // still counts once), so a report parses a few lists per GPU-minute instead of 60.
                let sql = format!(
                    "SELECT s.gpu_id, (s.ts_ms / 60000) * 60000 AS minute_ms, {} AS procs, \
                     s.allocations AS allocs, count(*) AS n \
                     FROM {} s JOIN gpus g ON g.id = s.gpu_id \
                     WHERE g.org_id = ?{} \
                     GROUP BY s.gpu_id, minute_ms, procs, allocs ORDER BY s.gpu_id, minute_ms",
                    PROCESSES_TEXT,
                    open_samples_between("?", "?"),
                    rc::only_gpus("s.gpu_id", gpus)
                );
                let sql = q(&sql);
                let query = sqlx::query_as::<_, (fleetlens_core::GpuId, i64, Option<String>, Option<String>, i64)>(&sql)
                    .bind(from_ms)
                    .bind(to_ms)
                    .bind(org)
                    .bind_gpus(gpus);
                let rows = query.fetch_all(&self.pool).await?;
                let sealed = $crate::blocks::$dialect::org_samples(&self.pool, org, gpus, from_ms, to_ms).await?;
                let rows = $crate::blocks::add_sealed_process_groups(rows, sealed);
                Ok(rows
                    .into_iter()
                    .map(|(gpu_id, minute_ms, p, a, n)| $crate::ProcessList {
                        gpu_id,
                        minute_ms,
                        processes: p.and_then(|p| serde_json::from_str(&p).ok()),
                        allocations: $crate::columns::parse_allocations(a.as_deref()),
                        samples: u32::try_from(n).unwrap_or(u32::MAX),
                    })
                    .collect())
            }
        }

        #[async_trait::async_trait]
        impl $crate::Store for $store {
            $($own)*

            async fn close_minutes(&self, now_ms: i64, lateness_ms: i64) -> $crate::Result<u64> {
                self.close_before(rc::close_cutoff(now_ms, lateness_ms)).await
            }

            async fn seal_closed_hours(&self, now_ms: i64, max_blocks: u64) -> $crate::Result<$crate::SealReport> {
                let mut report = $crate::blocks::$dialect::seal(&self.pool, now_ms, max_blocks).await?;
                if !report.more {
                    // Then the minute rollups of the same closed hours.
                    (report.minute_blocks, report.more) = $crate::blocks::$dialect::pack(&self.pool, now_ms, max_blocks).await?;
                }
                if !report.more {
                    report.partitions_dropped = $crate::blocks::$dialect::after_pass(&self.pool, now_ms).await?;
                }
                Ok(report)
            }
        }
    }
    };
}

pub(crate) use impl_store;
