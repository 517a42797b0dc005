//! A GPU as the registry knows it.

use serde::{Deserialize, Serialize};

/// Who a GPU is, where and what it is, and when it was seen: a `gpus` row without its key.
/// The store's record and the API's GPU list carry it whole (flattened), so the list of these
/// fields is written once.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct GpuInfo {
    pub uuid: String,
    pub host: String,
    /// NVML's index of the GPU on its host.
    #[cfg_attr(feature = "sqlx", sqlx(try_from = "StoredIndex"))]
    pub gpu_index: Option<u32>,
    /// Product name as NVML reports it (`NVIDIA H100 80GB HBM3`).
    pub name: Option<String>,
    pub mem_total_bytes: Option<i64>,
    pub power_limit_w: Option<f64>,
    pub first_seen_ms: i64,
    pub last_seen_ms: i64,
}

/// A GPU index as stored: a nullable `BIGINT` (PostgreSQL has no unsigned 32-bit column type).
/// A stored value outside `u32` reads as absent, as it did before this type existed.
#[cfg(feature = "sqlx")]
pub struct StoredIndex(Option<u32>);

#[cfg(feature = "sqlx")]
impl<DB: sqlx::Database> sqlx::Type<DB> for StoredIndex
where
    i64: sqlx::Type<DB>,
{
    fn type_info() -> DB::TypeInfo {
        <i64 as sqlx::Type<DB>>::type_info()
    }

    fn compatible(ty: &DB::TypeInfo) -> bool {
        <i64 as sqlx::Type<DB>>::compatible(ty)
    }
}

#[cfg(feature = "sqlx")]
impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for StoredIndex
where
    Option<i64>: sqlx::Decode<'r, DB>,
{
    fn decode(value: DB::ValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        let stored = <Option<i64> as sqlx::Decode<'r, DB>>::decode(value)?;
        Ok(StoredIndex(stored.and_then(|i| u32::try_from(i).ok())))
    }
}

#[cfg(feature = "sqlx")]
impl From<StoredIndex> for Option<u32> {
    fn from(index: StoredIndex) -> Self {
        index.0
    }
}
