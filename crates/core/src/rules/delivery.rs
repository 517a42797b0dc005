//! The delivery log: one line per attempt to deliver a notification message (and per message a
//! silence held back).

use serde::{Deserialize, Serialize};

use super::kinds::{AttemptOutcome, MessageKind, OutboxStatus};
use crate::{AlertId, ChannelId, MessageId};

// One line of the delivery log, defined once: the store reads it as part of the log's row
// (flattened into `DeliveryRecord`) and the API sends it flattened into `DeliveryView`. The doc
// comment below is the OpenAPI schema's description.
/// One delivery attempt of a notification message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct DeliveryAttempt {
    /// The outbox message attempted (null when none was enqueued: one a silence held back).
    #[cfg_attr(feature = "sqlx", sqlx(rename = "outbox_id"))]
    pub message_id: Option<MessageId>,
    pub alert_id: Option<AlertId>,
    /// Never reused: the channel the attempt went to, even after it was deleted.
    pub channel_id: ChannelId,
    pub kind: MessageKind,
    pub attempt: i64,
    pub at_ms: i64,
    /// `delivered`, `retry`, `failed`, `suppressed` (a silence held it back) or `lease_lost`.
    pub outcome: AttemptOutcome,
    pub status_code: Option<i64>,
    pub error: Option<String>,
    pub duration_ms: Option<i64>,
}

// A notification message in the outbox, defined once: the store reads it flattened into
// `OutboxRecord` (with its organisation, alert and payload) and the API sends it as it is. The
// doc comment below is the OpenAPI schema's description.
/// A notification message in the outbox: where it goes and how its delivery stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct OutboxMessage {
    pub id: MessageId,
    pub channel_id: ChannelId,
    pub kind: MessageKind,
    pub seq: i64,
    /// `pending`, `sending`, `delivered` or `failed`.
    pub status: OutboxStatus,
    pub attempts: i64,
    pub next_attempt_ms: i64,
    pub last_error: Option<String>,
    pub last_status_code: Option<i64>,
    pub created_ms: i64,
    pub delivered_ms: Option<i64>,
}
