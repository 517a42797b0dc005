//! Typed ids of the stored entities. Each is the database's integer key in a newtype, so that a
//! team id cannot be passed where a user id is meant, and a signature says which entity it
//! takes. On the wire they are plain integers (`#[serde(transparent)]`); in SQL they bind and
//! decode as `BIGINT` (feature `sqlx`).

macro_rules! ids {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        #[derive(serde::Serialize, serde::Deserialize)]
        #[serde(transparent)]
        #[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(transparent))]
        pub struct $name(pub i64);

        impl $name {
            /// The integer key.
            pub const fn get(self) -> i64 {
                self.0
            }
        }

        impl From<i64> for $name {
            fn from(id: i64) -> Self {
                $name(id)
            }
        }

        impl From<$name> for i64 {
            fn from(id: $name) -> i64 {
                id.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }

        impl std::str::FromStr for $name {
            type Err = std::num::ParseIntError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                s.parse().map($name)
            }
        }

        #[cfg(feature = "openapi")]
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                <i64 as utoipa::PartialSchema>::schema()
            }
        }

        #[cfg(feature = "openapi")]
        impl utoipa::ToSchema for $name {}
    )*};
}

ids! {
    /// An organisation (tenant): every other entity belongs to one.
    OrgId,
    /// A GPU (its row in `gpus`; the UUID is its name).
    GpuId,
    /// A team of an organisation.
    TeamId,
    /// A user of an organisation.
    UserId,
    /// An API key.
    ApiKeyId,
    /// An alert rule.
    RuleId,
    /// A fired alert.
    AlertId,
    /// A notification group of alerts (one channel, one group key).
    AlertGroupId,
    /// A notification channel (Slack, webhook, Alertmanager).
    ChannelId,
    /// An alert silence.
    SilenceId,
    /// A notification message (a row of the outbox).
    MessageId,
    /// One delivery attempt of a notification message (a line of the delivery log).
    DeliveryId,
    /// A GPU event (an XID error, a GPU lost or recovered, …).
    GpuEventId,
    /// A job run (a Slurm job, pod, container or process seen on GPUs).
    JobRunId,
    /// A job's reported throughput (`POST /api/v1/jobs`, for its MFU).
    JobId,
    /// A report route (where the report cards of finished job runs go).
    ReportRouteId,
    /// An idle-reclaim policy.
    ReclaimPolicyId,
    /// A reclaim of one GPU by a policy.
    ReclaimId,
    /// A logged step of a reclaim.
    ReclaimStepId,
    /// A kill command for an agent (a reclaim's action).
    AgentCommandId,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_plain_integers_on_the_wire() {
        assert_eq!(serde_json::to_string(&GpuId(42)).unwrap(), "42");
        assert_eq!(serde_json::from_str::<TeamId>("7").unwrap(), TeamId(7));
        assert!(serde_json::from_str::<TeamId>("\"7\"").is_err());
        assert_eq!("12".parse::<UserId>().unwrap(), UserId(12));
        assert_eq!(i64::from(OrgId(3)), 3);
        assert_eq!(serde_json::from_str::<Option<MessageId>>("5").unwrap(), Some(MessageId(5)));
        assert_eq!(serde_json::to_string(&DeliveryId(9)).unwrap(), "9");
    }
}
