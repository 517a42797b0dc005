//! Things that happen to a GPU between samples, as the agent saw them: an XID error from the
//! driver, the GPU falling off the bus, the GPU answering again. They travel with the samples
//! of the host's next batch.

use serde::{Deserialize, Serialize};

use crate::validate::{MAX_FUTURE_SKEW_MS, MAX_TEXT_LEN};

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum GpuEventKind {
    /// The NVIDIA driver reported an XID error (`xid` holds its number when NVML gives it).
    Xid,
    /// The GPU stopped answering (NVML `GpuLost`, reset required …): no samples until it does.
    GpuLost,
    /// A GPU that had stopped answering answers again.
    GpuRecovered,
    /// The GPU's GPM counters (SM activity & co.) cannot be read for now — another profiler
    /// (Nsight Compute, DCGM's profiling module) holds them, or GPM answered with errors or with
    /// frozen values: those fields are absent (never 0) until `gpm_available`. `message` says why.
    GpmUnavailable,
    /// GPM counters count again after a `gpm_unavailable`.
    GpmAvailable,
}

impl GpuEventKind {
    pub const ALL: [Self; 5] = [Self::Xid, Self::GpuLost, Self::GpuRecovered, Self::GpmUnavailable, Self::GpmAvailable];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Xid => "xid",
            Self::GpuLost => "gpu_lost",
            Self::GpuRecovered => "gpu_recovered",
            Self::GpmUnavailable => "gpm_unavailable",
            Self::GpmAvailable => "gpm_available",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "xid" => Some(Self::Xid),
            "gpu_lost" => Some(Self::GpuLost),
            "gpu_recovered" => Some(Self::GpuRecovered),
            "gpm_unavailable" => Some(Self::GpmUnavailable),
            "gpm_available" => Some(Self::GpmAvailable),
            _ => None,
        }
    }
}

/// One event of one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuEvent {
    /// When the agent saw it, Unix milliseconds.
    pub ts_ms: i64,
    /// The GPU's UUID.
    pub uuid: String,
    pub kind: GpuEventKind,
    /// The XID number, for `xid` events where the driver gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid: Option<u64>,
    /// What the agent knows beyond that (NVML's error text …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Longest event message.
pub const MAX_EVENT_MESSAGE_LEN: usize = 1024;

/// Why an event is refused: the field at fault and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventError {
    pub field: &'static str,
    pub message: String,
}

/// Check one event as received (`now_ms`: the server's clock).
pub fn validate_event(e: &GpuEvent, now_ms: i64) -> Result<(), EventError> {
    let fail = |field, message: String| Err(EventError { field, message });
    let uuid = e.uuid.trim();
    if uuid.is_empty() || uuid.len() > MAX_TEXT_LEN || uuid.chars().any(char::is_control) {
        return fail("uuid", "required: 1–256 printable characters".into());
    }
    if e.ts_ms <= 0 {
        return fail("ts_ms", "must be a positive Unix timestamp in milliseconds".into());
    }
    if e.ts_ms > now_ms + MAX_FUTURE_SKEW_MS {
        return fail("ts_ms", format!("{} is more than 5 minutes in the future (server time {now_ms})", e.ts_ms));
    }
    if e.xid.is_some() && e.kind != GpuEventKind::Xid {
        return fail("xid", format!("only `xid` events carry an XID number, not `{}`", e.kind.as_str()));
    }
    if e.xid.is_some_and(|x| x > i64::MAX as u64) {
        return fail("xid", "too large".into());
    }
    if let Some(m) = &e.message
        && (m.len() > MAX_EVENT_MESSAGE_LEN || m.chars().any(|c| c.is_control() && c != '\n'))
    {
        return fail("message", format!("at most {MAX_EVENT_MESSAGE_LEN} printable characters"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xid(ts_ms: i64) -> GpuEvent {
        GpuEvent { ts_ms, uuid: "GPU-1".into(), kind: GpuEventKind::Xid, xid: Some(79), message: None }
    }

    #[test]
    fn events_are_checked_field_by_field() {
        let now = 1_800_000_000_000;
        assert_eq!(validate_event(&xid(now), now), Ok(()));
        assert_eq!(validate_event(&xid(now + 400_000), now).unwrap_err().field, "ts_ms");
        assert_eq!(validate_event(&xid(0), now).unwrap_err().field, "ts_ms");
        let mut e = xid(now);
        e.uuid = " ".into();
        assert_eq!(validate_event(&e, now).unwrap_err().field, "uuid");
        let mut e = xid(now);
        e.kind = GpuEventKind::GpuLost;
        assert_eq!(validate_event(&e, now).unwrap_err().field, "xid");
        let mut e = xid(now);
        e.message = Some("x".repeat(MAX_EVENT_MESSAGE_LEN + 1));
        assert_eq!(validate_event(&e, now).unwrap_err().field, "message");
    }

    #[test]
    fn kinds_round_trip_through_their_names() {
        for k in GpuEventKind::ALL {
            assert_eq!(GpuEventKind::parse(k.as_str()), Some(k));
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
        }
        assert_eq!(GpuEventKind::parse("reboot"), None);
    }
}
