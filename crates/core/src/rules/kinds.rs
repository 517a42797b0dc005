//! The names of alerting: how severe a rule is, what kind of receiver a channel is, what
//! kind of message an outbox row carries, and the statuses of alerts, messages and deliveries.

crate::named_enum! {
    /// How severe a rule's alerts are, listed mildest first (they sort in this order).
    pub enum Severity("severity") {
        Info = "info",
        Warning = "warning",
        Critical = "critical",
    }
}

crate::named_enum! {
    /// What a notification channel posts to, and so which payload it gets.
    pub enum ChannelKind("channel kind") {
        /// A Slack incoming webhook (Block Kit message).
        Slack = "slack",
        /// Any HTTP endpoint (Alertmanager webhook v4 body).
        Webhook = "webhook",
        /// An Alertmanager's `/api/v2/alerts` (it groups and routes itself).
        Alertmanager = "alertmanager",
    }
}

crate::named_enum! {
    /// What a notification message (an outbox row, and each delivery attempt of it) is.
    pub enum MessageKind("message kind") {
        /// An alert (or its notification group) began firing.
        Firing = "firing",
        /// GPUs joined a firing notification group.
        Update = "update",
        /// A reminder of a still-firing alert.
        Repeat = "repeat",
        Resolved = "resolved",
        /// `POST /notification-channels/{id}/test`.
        Test = "test",
        /// A channel's daily or weekly digest.
        Digest = "digest",
        /// An idle-reclaim notice to the owner.
        ReclaimNotice = "reclaim_notice",
        /// An idle-reclaim action webhook.
        ReclaimAction = "reclaim_action",
        /// A finished job's report card.
        JobReport = "job_report",
    }
}

crate::named_enum! {
    /// Where an alert instance (a rule on a GPU) is in its life.
    pub enum AlertStatus("alert status") {
        /// The condition holds, not yet for the rule's `for_s`.
        Pending = "pending",
        Firing = "firing",
        Resolved = "resolved",
    }
}

crate::named_enum! {
    /// Where a notification message (an outbox row) is on its way out.
    pub enum OutboxStatus("outbox status") {
        /// Waiting for its next attempt.
        Pending = "pending",
        /// A sender holds its lease.
        Sending = "sending",
        Delivered = "delivered",
        /// Given up (a permanent error, too old, or its channel was deleted).
        Failed = "failed",
    }
}

crate::named_enum! {
    /// What one line of the delivery log came to.
    pub enum AttemptOutcome("delivery outcome") {
        Delivered = "delivered",
        /// It failed for now; the message is tried again.
        Retry = "retry",
        /// It failed for good.
        Failed = "failed",
        /// A silence held it back (no attempt was made).
        Suppressed = "suppressed",
        /// The sender answered after its lease had passed to another sender.
        LeaseLost = "lease_lost",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severities_are_ordered_mildest_first_and_match_the_shipped_names() {
        assert!(Severity::Info < Severity::Warning && Severity::Warning < Severity::Critical);
        assert_eq!(Severity::NAMES, super::super::SEVERITIES);
        assert_eq!(serde_json::to_string(&Severity::Critical).unwrap(), "\"critical\"");
    }

    #[test]
    fn an_unknown_channel_kind_names_the_accepted_ones() {
        let e = serde_json::from_str::<ChannelKind>("\"email\"").unwrap_err().to_string();
        assert!(e.contains("`slack`, `webhook`, `alertmanager`"), "{e}");
        assert_eq!("alertmanager".parse::<ChannelKind>(), Ok(ChannelKind::Alertmanager));
    }

    #[test]
    fn statuses_and_outcomes_keep_their_stored_names() {
        assert_eq!(AlertStatus::NAMES, ["pending", "firing", "resolved"]);
        assert_eq!(OutboxStatus::NAMES, ["pending", "sending", "delivered", "failed"]);
        assert_eq!(AttemptOutcome::LeaseLost.as_str(), "lease_lost");
        let e = serde_json::from_str::<AlertStatus>("\"open\"").unwrap_err().to_string();
        assert!(e.contains("`pending`, `firing`, `resolved`"), "{e}");
    }

    #[test]
    fn message_kinds_read_back_from_their_text() {
        for k in MessageKind::ALL {
            assert_eq!(MessageKind::try_from(k.to_string()), Ok(k));
        }
        assert!(MessageKind::try_from("page".to_string()).is_err());
    }
}
