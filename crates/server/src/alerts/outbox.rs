//! The outbox sender (every replica runs one): claim due messages with a lease, POST them,
//! record the outcome. Retries back off exponentially (with a little jitter); a 429 pauses the
//! channel for its `Retry-After`; a 4xx other than 408/425/429 is permanent, and so are a 3xx
//! (redirects are not followed) and an address the egress policy refuses ([`crate::egress`]);
//! a message not delivered within the give-up time is marked failed. Each channel gets at most
//! one message per its `min_interval_ms` (Slack: 1 s), in order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetlens_core::MessageId;
use fleetlens_store::alerts::{ClaimedMessage, DeliveryOutcome, DeliveryResult};
use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, RETRY_AFTER};
use tokio::task::JoinSet;

use super::AlertsCtx;
use super::render;
use crate::egress::{MAX_ANSWER_BYTES, error_text, is_refusal};
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
    let started = Instant::now();
    let result = attempt(ctx, &m).await;
    let duration_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
    let now = now_ms();
    let result = match result {
        Attempt::Answered { status, retry_after_s } => {
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
                let retry_after =
                    retry_after_s.map(|s| now + i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX / 2));
                // The answer's body is never recorded: it may be anything the URL reaches.
                let error = Some(if status.is_redirection() {
                    format!("HTTP {status}: redirects are not followed (point the channel at the final URL)")
                } else {
                    format!("HTTP {status}")
                });
                let transient = status.is_server_error() || matches!(status.as_u16(), 408 | 425 | 429);
                let pause = (status.as_u16() == 429).then(|| retry_after.unwrap_or(now + 1000));
                let outcome = if transient {
                    retry_or_give_up(ctx, &m, now, backoff_at(ctx, &m, now).max(pause.unwrap_or(0)))
                } else {
                    DeliveryOutcome::Failed
                };
                DeliveryResult { outcome, status_code: code, error, duration_ms, channel_pause_until_ms: pause }
            }
        }
        Attempt::Refused(error) => DeliveryResult {
            // The address is not allowed: retrying cannot help.
            outcome: DeliveryOutcome::Failed,
            status_code: None,
            error: Some(error),
            duration_ms,
            channel_pause_until_ms: None,
        },
        Attempt::Failed(error) => DeliveryResult {
            outcome: retry_or_give_up(ctx, &m, now, backoff_at(ctx, &m, now)),
            status_code: None,
            error: Some(error),
            duration_ms,
            channel_pause_until_ms: None,
        },
    };
    match result.outcome {
        DeliveryOutcome::Delivered => {
            tracing::debug!(
                id = m.outbox.message.id.get(),
                channel = m.channel.id.get(),
                kind = m.outbox.message.kind.as_str(),
                "notification delivered"
            )
        }
        _ => tracing::warn!(
            id = m.outbox.message.id.get(),
            channel = m.channel.id.get(),
            attempt = m.outbox.message.attempts,
            error = result.error.as_deref().unwrap_or(""),
            "notification not delivered"
        ),
    }
    if let Err(e) = ctx.store.finish_notification(m.outbox.message.id, &ctx.owner, &result, now).await {
        // The lease runs out and another attempt follows; the receiver may see it twice.
        tracing::error!(error = %e, id = m.outbox.message.id.get(), "outbox: cannot record a delivery");
    }
}

/// What one POST came to. Errors are texts without the channel's URL (a secret).
enum Attempt {
    Answered {
        status: StatusCode,
        retry_after_s: Option<u64>,
    },
    /// The egress policy refused the address.
    Refused(String),
    /// No answer (connection, TLS, timeout, …).
    Failed(String),
}

async fn attempt(ctx: &AlertsCtx, m: &ClaimedMessage) -> Attempt {
    let Ok(url) = reqwest::Url::parse(&render::target_url(&m.channel)) else {
        return Attempt::Refused("the channel's URL does not parse".into());
    };
    // reqwest connects to a literal IP without asking the (guarded) resolver: check it here.
    if let Err(e) = ctx.egress.check_url(&url) {
        return Attempt::Refused(e.to_string());
    }
    let sent = ctx
        .http
        .post(url.clone())
        .header(CONTENT_TYPE, "application/json")
        .header("X-Fleetlens-Message-Id", m.outbox.message.id.to_string())
        .header("Idempotency-Key", format!("fleetlens-{}-{}", m.outbox.org_id, m.outbox.message.id))
        .body(m.outbox.payload.clone())
        .send()
        .await;
    match sent {
        Ok(mut resp) => {
            let status = resp.status();
            let retry_after_s = resp
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            // Read a little of the answer (so a short one completes and the connection can be
            // reused), never all of it: its size is the receiver's choice.
            let mut read = 0;
            while read < MAX_ANSWER_BYTES {
                match resp.chunk().await {
                    Ok(Some(chunk)) => read += chunk.len(),
                    _ => break,
                }
            }
            Attempt::Answered { status, retry_after_s }
        }
        Err(e) if is_refusal(&e) => Attempt::Refused(error_text(e, &url)),
        Err(e) => Attempt::Failed(error_text(e, &url)),
    }
}

fn backoff_at(ctx: &AlertsCtx, m: &ClaimedMessage, now: i64) -> i64 {
    now + backoff_ms(ctx, m.outbox.message.id, m.outbox.message.attempts)
}

fn retry_or_give_up(ctx: &AlertsCtx, m: &ClaimedMessage, now: i64, at_ms: i64) -> DeliveryOutcome {
    if at_ms - m.outbox.message.created_ms > ctx.cfg.give_up_ms()
        || now - m.outbox.message.created_ms > ctx.cfg.give_up_ms()
    {
        DeliveryOutcome::Failed
    } else {
        DeliveryOutcome::Retry { at_ms }
    }
}

/// base × 2^(attempt−1), at most the maximum, ±10 % jitter (deterministic per message).
pub fn backoff_ms(ctx: &AlertsCtx, id: MessageId, attempt: i64) -> i64 {
    let id = id.get();
    let base = ctx.cfg.retry_base_ms();
    let exp = u32::try_from((attempt - 1).clamp(0, 30)).unwrap_or(30);
    let raw = base.saturating_mul(1i64 << exp).min(ctx.cfg.retry_max_ms());
    let mix = (id.wrapping_mul(0x9E37_79B9) ^ attempt.wrapping_mul(0x85EB_CA6B)).rem_euclid(21) - 10;
    (raw + raw * mix / 100).max(1)
}
