//! The outbox sender (every replica runs one): claim due messages with a lease, POST them,
//! record the outcome. Retries back off exponentially (with a little jitter); a 429 pauses the
//! channel for its `Retry-After`; a 4xx other than 408/425/429 is permanent; a message not
//! delivered within the give-up time is marked failed. Each channel gets at most one message
//! per its `min_interval_ms` (Slack: 1 s), in order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetlens_store::alerts::{ClaimedMessage, DeliveryOutcome, DeliveryResult};
use reqwest::header::{CONTENT_TYPE, RETRY_AFTER};
use tokio::task::JoinSet;

use super::AlertsCtx;
use super::render;
use crate::time::now_ms;

/// How often the sender looks for due messages when nothing wakes it.
const POLL: Duration = Duration::from_millis(200);
/// Messages claimed per round (one per channel).
const CLAIM_MAX: i64 = 32;

pub async fn run(ctx: Arc<AlertsCtx>) {
    loop {
        tokio::select! {
            _ = ctx.outbox_wake.notified() => {}
            _ = tokio::time::sleep(POLL) => {}
        }
        loop {
            let claimed = match ctx.store.claim_notifications(&ctx.owner, now_ms(), ctx.cfg.lease_ms(), CLAIM_MAX).await
            {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "outbox: cannot claim messages");
                    break;
                }
            };
            if claimed.is_empty() {
                break;
            }
            let mut set = JoinSet::new();
            for m in claimed {
                let ctx = ctx.clone();
                set.spawn(async move { deliver(&ctx, m).await });
            }
            while set.join_next().await.is_some() {}
        }
    }
}

/// Send one claimed message and record what happened.
async fn deliver(ctx: &AlertsCtx, m: ClaimedMessage) {
    let url = render::target_url(&m.channel);
    let started = Instant::now();
    let sent = ctx
        .http
        .post(&url)
        .header(CONTENT_TYPE, "application/json")
        .header("X-Fleetlens-Message-Id", m.message.id.to_string())
        .header("Idempotency-Key", format!("fleetlens-{}-{}", m.message.org_id, m.message.id))
        .body(m.message.payload.clone())
        .send()
        .await;
    let now = now_ms();
    let duration_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
    let retry = |at_ms: i64| retry_or_give_up(ctx, &m, now, at_ms);
    let backoff_at = now + backoff_ms(ctx, m.message.id, m.message.attempts);
    let result = match sent {
        Ok(resp) => {
            let status = resp.status();
            let retry_after = resp
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|s| now + i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX / 2));
            let body: String = resp.text().await.unwrap_or_default().chars().take(300).collect();
            let code = Some(i64::from(status.as_u16()));
            if status.is_success() {
                DeliveryResult {
                    outcome: DeliveryOutcome::Delivered,
                    status_code: code,
                    error: None,
                    duration_ms,
                    channel_pause_until_ms: None,
                }
            } else {
                let error = Some(format!("HTTP {}: {}", status.as_u16(), body.trim()));
                let transient = status.is_server_error() || matches!(status.as_u16(), 408 | 425 | 429);
                let pause = (status.as_u16() == 429).then(|| retry_after.unwrap_or(now + 1000));
                let outcome =
                    if transient { retry(backoff_at.max(pause.unwrap_or(0))) } else { DeliveryOutcome::Failed };
                DeliveryResult { outcome, status_code: code, error, duration_ms, channel_pause_until_ms: pause }
            }
        }
        Err(e) => DeliveryResult {
            outcome: retry(backoff_at),
            status_code: None,
            error: Some(error_chain(&e)),
            duration_ms,
            channel_pause_until_ms: None,
        },
    };
    match result.outcome {
        DeliveryOutcome::Delivered => {
            tracing::debug!(id = m.message.id, channel = m.channel.id, kind = m.message.kind, "notification delivered")
        }
        _ => tracing::warn!(
            id = m.message.id,
            channel = m.channel.id,
            attempt = m.message.attempts,
            error = result.error.as_deref().unwrap_or(""),
            "notification not delivered"
        ),
    }
    if let Err(e) = ctx.store.finish_notification(m.message.id, &ctx.owner, &result, now).await {
        // The lease runs out and another attempt follows; the receiver may see it twice.
        tracing::error!(error = %e, id = m.message.id, "outbox: cannot record a delivery");
    }
}

fn retry_or_give_up(ctx: &AlertsCtx, m: &ClaimedMessage, now: i64, at_ms: i64) -> DeliveryOutcome {
    if at_ms - m.message.created_ms > ctx.cfg.give_up_ms() || now - m.message.created_ms > ctx.cfg.give_up_ms() {
        DeliveryOutcome::Failed
    } else {
        DeliveryOutcome::Retry { at_ms }
    }
}

/// base × 2^(attempt−1), at most the maximum, ±10 % jitter (deterministic per message).
pub fn backoff_ms(ctx: &AlertsCtx, id: i64, attempt: i64) -> i64 {
    let base = ctx.cfg.retry_base_ms();
    let exp = u32::try_from((attempt - 1).clamp(0, 30)).unwrap_or(30);
    let raw = base.saturating_mul(1i64 << exp).min(ctx.cfg.retry_max_ms());
    let mix = (id.wrapping_mul(0x9E37_79B9) ^ attempt.wrapping_mul(0x85EB_CA6B)).rem_euclid(21) - 10;
    (raw + raw * mix / 100).max(1)
}

fn error_chain(e: &reqwest::Error) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
