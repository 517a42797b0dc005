//! `GET /api/openapi.json`: the OpenAPI 3.1 document of the HTTP API, generated from the code.
//!
//! Every route is registered through [`utoipa_axum`]'s `routes!` (see [`crate::app`]), which
//! takes the path and method from the handler's `#[utoipa::path]`: a route cannot be served
//! without being documented. The document is built once, from the same route table the server
//! runs ([`crate::app::documented_routes`]).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use fleetlens_api::ErrorBody;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi};

/// Name of the bearer API-key security scheme.
pub const BEARER: &str = "api_key";
/// Name of the session-cookie security scheme.
pub const SESSION: &str = "session";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Fleetlens API",
        description = "GPU-efficiency monitor. Authenticate with `Authorization: Bearer <api key>` \
            (scopes `ingest`, `read`, `admin`) or a dashboard session cookie from \
            `POST /api/v1/auth/login`; state-changing requests made with a session must send the \
            session's CSRF token in `X-CSRF-Token`. Times in query strings are RFC 3339 or Unix \
            milliseconds; times in bodies and responses are Unix milliseconds. Every error is \
            `{\"error\": {\"code\", \"message\"}}`.",
    ),
    components(schemas(ErrorBody, fleetlens_api::ErrorDetail, fleetlens_api::alerts::RuleErrorBody)),
    modifiers(&Security),
    security(("api_key" = []), ("session" = [])),
)]
struct ApiDoc;

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            BEARER,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("An API key (`flk_…`); its scopes decide what it may do."))
                    .build(),
            ),
        );
        components.add_security_scheme(
            SESSION,
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                "fleetlens_session",
                "Dashboard session from `POST /api/v1/auth/login` (named `__Host-fleetlens_session` \
                 when cookies are marked Secure). State-changing requests also need `X-CSRF-Token`.",
            ))),
        );
    }
}

/// The document, built once from the server's route table.
pub fn document() -> &'static utoipa::openapi::OpenApi {
    static DOC: OnceLock<utoipa::openapi::OpenApi> = OnceLock::new();
    DOC.get_or_init(|| {
        let (_, paths) = crate::app::documented_routes().split_for_parts();
        let mut doc = ApiDoc::openapi();
        doc.merge(paths);
        doc
    })
}

/// The OpenAPI document of this server (no authentication: it holds no data).
#[utoipa::path(get, path = "/api/openapi.json", tag = "meta", security(()),
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json", body = Object)))]
pub async fn openapi_json() -> Response {
    static TEXT: OnceLock<String> = OnceLock::new();
    let text = TEXT.get_or_init(|| serde_json::to_string(document()).unwrap_or_else(|_| "{}".into()));
    ([(CONTENT_TYPE, "application/json")], text.as_str()).into_response()
}

/// An error response: the shared `ErrorBody` schema.
pub fn error_response(description: &str) -> RefOr<utoipa::openapi::Response> {
    RefOr::T(
        ResponseBuilder::new()
            .description(description)
            .content("application/json", ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build())
            .build(),
    )
}

fn describe(status: u16) -> &'static str {
    match status {
        400 => "Malformed request: bad JSON, a query or path value of the wrong type (`bad_request`, `invalid_json`)",
        401 => "No or invalid API key or session (`unauthenticated`, `invalid_credentials`)",
        403 => "The key's scope or the user's role does not allow this, or the CSRF check failed",
        404 => "No such object in the caller's organisation",
        409 => {
            "Conflicts with an existing object (e.g. a name already taken; at ingest, a GPU registered on another host)"
        }
        413 => {
            "Request body too large (at ingest also: decoded JSON, samples, processes, events or labels past their limits)"
        }
        415 => "Content-Type is not application/json (or an unsupported Content-Encoding)",
        422 => "A value is out of range or invalid (`validation_failed`, with `field`)",
        429 => {
            "Too many attempts (`rate_limited`), requests in flight (`too_many_requests`) or an organisation quota reached (`quota_exceeded`, with the quota in `field`); with Retry-After"
        }
        503 => {
            "The database is unavailable (`storage_unavailable`), or password checks are saturated (`busy`, with Retry-After)"
        }
        _ => "Error",
    }
}

macro_rules! error_set {
    ($($(#[$m:meta])* $name:ident: $($code:literal),+;)+) => {$(
        $(#[$m])*
        pub struct $name;
        impl utoipa::IntoResponses for $name {
            fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
                [$($code),+].into_iter().map(|c: u16| (c.to_string(), error_response(describe(c)))).collect()
            }
        }
    )+};
}

error_set! {
    /// Errors of an authenticated read without parameters.
    AuthErrors: 401, 403, 503;
    /// Errors of an authenticated read with query parameters.
    QueryErrors: 400, 401, 403, 422, 503;
    /// Errors of an operation on one object named in the path.
    ItemErrors: 400, 401, 403, 404, 503;
    /// Errors of a read of one object with query parameters.
    ItemQueryErrors: 400, 401, 403, 404, 422, 503;
    /// Errors of a request with a JSON body.
    BodyErrors: 400, 401, 403, 409, 413, 415, 422, 503;
    /// Errors of a request with a JSON body on one object named in the path.
    ItemBodyErrors: 400, 401, 403, 404, 409, 413, 415, 422, 503;
    /// Errors of ingest: those of a JSON body, per-key concurrency and quotas.
    IngestErrors: 400, 401, 403, 409, 413, 415, 422, 429, 503;
    /// Errors of the live stream: those of a read, and its caps on open streams.
    StreamErrors: 400, 401, 403, 429, 503;
    /// Errors of the login.
    LoginErrors: 400, 401, 403, 413, 415, 422, 429, 503;
    /// Errors of a password change (its check of the current password is rate-limited).
    PasswordErrors: 400, 401, 403, 409, 413, 415, 422, 429, 503;
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use fleetlens_api::actions::ReportRouteView;
    use fleetlens_api::alerts::{DeliveryView, RuleView};
    use fleetlens_api::reclaim::{ReclaimPolicy, ReclaimStepView};
    use fleetlens_core::jobcard::ReportRouteSpec;
    use fleetlens_core::reclaim::{ReclaimAction, ReclaimLogLine, ReclaimLogStep, ReclaimPolicySpec};
    use fleetlens_core::rules::{DeliveryAttempt, RuleSpec};
    use fleetlens_core::{
        AttemptOutcome, ChannelId, DeliveryId, MessageKind, ReclaimId, ReclaimPolicyId, ReclaimStepId, ReportRouteId,
        RuleId, WorkloadState,
    };
    use serde_json::Value;

    /// The properties and required properties of a schema, through `$ref` and `allOf`.
    fn fields(doc: &Value, schema: &Value) -> (BTreeSet<String>, BTreeSet<String>) {
        if let Some(r) = schema["$ref"].as_str() {
            let name = r.rsplit('/').next().unwrap();
            return fields(doc, &doc["components"]["schemas"][name]);
        }
        let (mut props, mut required) = (BTreeSet::new(), BTreeSet::new());
        for part in schema["allOf"].as_array().into_iter().flatten() {
            let (p, r) = fields(doc, part);
            props.extend(p);
            required.extend(r);
        }
        props.extend(schema["properties"].as_object().into_iter().flatten().map(|(k, _)| k.clone()));
        required.extend(schema["required"].as_array().into_iter().flatten().map(|v| v.as_str().unwrap().to_string()));
        (props, required)
    }

    /// The document describes every field a view sends, through its `allOf` parts, and requires
    /// every one but `optional`.
    fn assert_described(doc: &Value, schema: &str, view: Value, optional: &[&str]) -> BTreeSet<String> {
        let sent: BTreeSet<String> = view.as_object().unwrap().keys().cloned().collect();
        let (props, required) = fields(doc, &doc["components"]["schemas"][schema]);
        assert_eq!(props, sent, "{schema}: properties");
        let optional: BTreeSet<String> = optional.iter().map(|f| f.to_string()).collect();
        assert_eq!(required, &sent - &optional, "{schema}: required");
        sent
    }

    /// `RuleView` flattens the rule as written (`allOf`): the document still describes every
    /// field it sends, and requires every one but the nullable `builtin`.
    #[test]
    fn a_rule_view_schema_describes_every_field_it_sends() {
        let doc = serde_json::to_value(super::document()).unwrap();
        let view = RuleView { id: RuleId(1), rule: RuleSpec::default(), builtin: None, created_ms: 0, updated_ms: 0 };
        let sent = assert_described(&doc, "RuleView", serde_json::to_value(&view).unwrap(), &["builtin"]);
        assert!(sent.len() >= 17 && sent.contains("name") && sent.contains("inhibit_scope"), "{sent:?}");
    }

    /// The reclaim policy and its logged steps, the report route and the delivery log line
    /// flatten their shared core struct too. A policy's spec is also the body that creates it,
    /// so what that body may leave out (the channels, `enabled`) is optional in the answer's
    /// schema as well.
    #[test]
    fn flattened_views_describe_every_field_they_send() {
        let doc = serde_json::to_value(super::document()).unwrap();
        let policy = ReclaimPolicy {
            id: ReclaimPolicyId(1),
            policy: ReclaimPolicySpec {
                name: "idle".into(),
                state: WorkloadState::IdleHeld,
                for_s: 60,
                grace_s: 60,
                action: ReclaimAction::AgentKill,
                action_channel_id: None,
                notice_channel_id: None,
                enabled: true,
            },
            created_ms: 0,
        };
        let optional = ["action_channel_id", "notice_channel_id", "enabled"];
        let sent = assert_described(&doc, "ReclaimPolicy", serde_json::to_value(&policy).unwrap(), &optional);
        assert_eq!(sent.len(), 10, "{sent:?}");

        let route = ReportRouteView {
            id: ReportRouteId(1),
            route: ReportRouteSpec {
                team_id: None,
                owner: None,
                channel_id: ChannelId(1),
                min_gpu_hours: 0.5,
                min_waste_pct: 20.0,
            },
            created_ms: 0,
        };
        let sent =
            assert_described(&doc, "ReportRouteView", serde_json::to_value(&route).unwrap(), &["team_id", "owner"]);
        assert_eq!(sent.len(), 7, "{sent:?}");

        let step = ReclaimStepView {
            id: ReclaimStepId(1),
            reclaim_id: ReclaimId(1),
            line: ReclaimLogLine {
                step: ReclaimLogStep::Notice,
                actor: "fleetlens".into(),
                dollars_held: None,
                at_ms: 0,
                detail: String::new(),
            },
        };
        let sent = assert_described(&doc, "ReclaimStepView", serde_json::to_value(&step).unwrap(), &["dollars_held"]);
        assert_eq!(sent.len(), 7, "{sent:?}");

        let delivery = DeliveryView {
            id: DeliveryId(1),
            delivery: DeliveryAttempt {
                message_id: None,
                alert_id: None,
                channel_id: ChannelId(1),
                kind: MessageKind::Firing,
                attempt: 0,
                at_ms: 0,
                outcome: AttemptOutcome::Suppressed,
                status_code: None,
                error: None,
                duration_ms: None,
            },
            channel_deleted: false,
        };
        let nullable = ["message_id", "alert_id", "status_code", "error", "duration_ms"];
        let sent = assert_described(&doc, "DeliveryView", serde_json::to_value(&delivery).unwrap(), &nullable);
        assert_eq!(sent.len(), 12, "{sent:?}");
    }
}
