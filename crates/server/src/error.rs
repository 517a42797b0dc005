//! The one error type of the HTTP edge: every failure becomes `{"error": {"code", "message"}}`.
//! 5xx are logged with their cause and shown to the client without internals.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use fleetlens_api::{ErrorBody, ErrorDetail};
use fleetlens_core::ValidationError;
use fleetlens_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    /// A body that does not parse; `path` locates the offending value (`samples[3].power_w`).
    #[error("invalid JSON{}: {message}", path.as_ref().map(|p| format!(" at {p}")).unwrap_or_default())]
    InvalidJson { path: Option<String>, message: String },
    /// A query parameter that cannot be read as its type (`?limit=abc`): 400, with `field`.
    #[error("{field}: {message}")]
    BadParam { field: String, message: String },
    #[error("{0}")]
    Validation(ValidationError),
    #[error("{field}: {message}")]
    Unprocessable { field: String, message: String },
    #[error("missing or malformed Authorization header: use `Authorization: Bearer <api key>`")]
    Unauthenticated,
    #[error("invalid or revoked API key")]
    BadKey,
    #[error("this API key lacks the `{0}` scope")]
    Forbidden(&'static str),
    #[error("your role `{role}` does not allow this (it needs `{needs}`)")]
    RoleForbidden { role: &'static str, needs: &'static str },
    /// The key was made with the scope, but its user's role no longer allows it.
    #[error(
        "this API key's user now has the role `{role}`, which does not allow `{needs}` (the key grants at most its user's current role)"
    )]
    KeyOwnerRoleForbidden { role: &'static str, needs: &'static str },
    /// Authenticated, but not allowed (not a scope or role question).
    #[error("{0}")]
    Denied(String),
    #[error("session expired or invalid: log in again")]
    BadSession,
    #[error("wrong email or password")]
    BadCredentials,
    /// A session request that failed the CSRF check.
    #[error("CSRF check failed: {0}")]
    Csrf(String),
    #[error("too many attempts: retry in {retry_after_s} s")]
    RateLimited { retry_after_s: u64 },
    /// A bounded resource (password hashing) is saturated: retry shortly.
    #[error("the server is busy checking passwords: retry in {retry_after_s} s")]
    Busy { retry_after_s: u64 },
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    NotFound(String),
    #[error("request body larger than {0} bytes")]
    TooLarge(usize),
    /// An ingest batch past a decoding limit (bytes once decoded, samples, processes …).
    #[error("{0}")]
    BatchTooLarge(String),
    /// A batch that would take the organisation past a quota (`quota`: `gpus`, `hosts`, `teams`).
    #[error("{message}")]
    Quota { quota: String, message: String },
    /// The caller already has as many requests of this kind in flight as it may.
    #[error("{message}")]
    InFlight { message: String, retry_after_s: u64 },
    #[error("{0}")]
    UnsupportedMedia(String),
    #[error("storage unavailable")]
    Store(StoreError),
}

impl From<StoreError> for ApiError {
    /// A unique key taken ([`StoreError::Conflict`]) is the client's conflict (409); every other
    /// store failure is the server's (503).
    fn from(e: StoreError) -> Self {
        if e.is_conflict() { ApiError::Conflict(e.to_string()) } else { ApiError::Store(e) }
    }
}

impl ApiError {
    /// A store failure where a unique key taken means `message` (a name in use): 409 with it;
    /// every other failure as [`From<StoreError>`] maps it.
    pub fn conflict_or(e: StoreError, message: impl Into<String>) -> ApiError {
        if e.is_conflict() { ApiError::Conflict(message.into()) } else { ApiError::Store(e) }
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::InvalidJson { .. } => (StatusCode::BAD_REQUEST, "invalid_json"),
            ApiError::BadParam { .. } => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::Validation(_) | ApiError::Unprocessable { .. } => {
                (StatusCode::UNPROCESSABLE_ENTITY, "validation_failed")
            }
            ApiError::Unauthenticated | ApiError::BadKey | ApiError::BadSession => {
                (StatusCode::UNAUTHORIZED, "unauthenticated")
            }
            ApiError::BadCredentials => (StatusCode::UNAUTHORIZED, "invalid_credentials"),
            ApiError::Forbidden(_)
            | ApiError::RoleForbidden { .. }
            | ApiError::KeyOwnerRoleForbidden { .. }
            | ApiError::Denied(_) => (StatusCode::FORBIDDEN, "forbidden"),
            ApiError::Csrf(_) => (StatusCode::FORBIDDEN, "csrf_failed"),
            ApiError::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
            ApiError::Busy { .. } => (StatusCode::SERVICE_UNAVAILABLE, "busy"),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::TooLarge(_) | ApiError::BatchTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            ApiError::Quota { .. } => (StatusCode::TOO_MANY_REQUESTS, "quota_exceeded"),
            ApiError::InFlight { .. } => (StatusCode::TOO_MANY_REQUESTS, "too_many_requests"),
            ApiError::UnsupportedMedia(_) => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
            ApiError::Store(StoreError::Invalid(_)) | ApiError::Store(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "storage_unavailable")
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if status.is_server_error() && !matches!(self, ApiError::Busy { .. }) {
            tracing::error!(error = ?self, "request failed");
        }
        let (sample_index, field) = match &self {
            ApiError::Validation(v) => (Some(v.index), Some(v.field.clone())),
            ApiError::Unprocessable { field, .. } | ApiError::BadParam { field, .. } => (None, Some(field.clone())),
            ApiError::Quota { quota, .. } => (None, Some(quota.clone())),
            ApiError::InvalidJson { path: Some(path), .. } => split_sample_path(path),
            _ => (None, None),
        };
        let body = ErrorBody {
            error: ErrorDetail { code: code.to_string(), message: self.to_string(), sample_index, field, column: None },
        };
        let mut response = (status, Json(body)).into_response();
        let retry_after_s = match self {
            ApiError::RateLimited { retry_after_s }
            | ApiError::Busy { retry_after_s }
            | ApiError::InFlight { retry_after_s, .. } => Some(retry_after_s),
            // A quota does not lift by itself: agents back off for minutes, not seconds.
            ApiError::Quota { .. } => Some(QUOTA_RETRY_AFTER_S),
            _ => None,
        };
        if let Some(s) = retry_after_s {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, s.into());
        }
        response
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// A body that does not parse as `T` (bad syntax, a wrong type, a missing required field): 400
/// `invalid_json`, with the path of the offending value as `field` where it is known. (A value
/// that parses but is not acceptable is a 422 `validation_failed`, from the handler.)
pub fn json_error(e: serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    let path = e.path().to_string();
    json_error_at(&path, e.into_inner().to_string())
}

/// [`json_error`] from a path tracked by hand (`serde_path_to_error::Track`) and its message.
pub fn json_error_at(path: &str, message: String) -> ApiError {
    // serde_path_to_error writes `?` for a position it could not name (a syntax error before
    // the first key of an object): not a field anyone could look up.
    let path = path.trim_end_matches("?").trim_end_matches('.');
    let known = !(path.is_empty() || path == "." || path.contains('?'));
    ApiError::InvalidJson { path: known.then(|| path.to_string()), message }
}

/// Parse a JSON body with [`json_error`]'s errors.
pub fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> ApiResult<T> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut *de).map_err(json_error)?;
    de.end().map_err(|e| ApiError::InvalidJson { path: None, message: e.to_string() })?;
    Ok(value)
}

/// A JSON body must say so (`Content-Type: application/json`): a cross-site form cannot send
/// that type without a CORS preflight, which this server never grants.
pub fn require_json(headers: &axum::http::HeaderMap) -> ApiResult<()> {
    let is_json = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.trim_start().to_ascii_lowercase().starts_with("application/json"));
    if is_json { Ok(()) } else { Err(ApiError::UnsupportedMedia("send Content-Type: application/json".into())) }
}

/// A JSON request body (`Content-Type: application/json`), parsed with the same errors as
/// every other body of the API (axum's own `Json` answers a wrong type with a 422 and serde's
/// text, without the field).
pub struct JsonBody<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> axum::extract::FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        require_json(req.headers())?;
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|e| ApiError::BadRequest(format!("cannot read the body: {e}")))?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// `Retry-After` of a refused quota, seconds.
pub const QUOTA_RETRY_AFTER_S: u64 = 300;

/// Middleware: every 4xx/5xx leaves as `{"error": {"code", "message"}}`, also those made
/// outside the handlers (axum's extractor rejections: a path id that is not a number, a query
/// value of the wrong type; 405 for a method a path does not have), which are plain text.
pub async fn json_client_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024).await.unwrap_or_default();
    let mut message = String::from_utf8_lossy(&text).trim().to_string();
    if message.is_empty() {
        message = status.canonical_reason().unwrap_or("error").to_string();
    }
    let code = match status {
        StatusCode::BAD_REQUEST => "bad_request",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::UNPROCESSABLE_ENTITY => "validation_failed",
        s if s.is_server_error() => "internal",
        _ => "error",
    };
    // axum's query rejection reads "Failed to deserialize query string: limit: invalid digit
    // found in string": the parameter at fault becomes `field`, as in the handlers' own errors.
    let field = message
        .strip_prefix("Failed to deserialize query string: ")
        .and_then(|rest| rest.split_once(": "))
        .map(|(name, _)| name.to_string())
        .filter(|name| !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    let body = ErrorBody { error: ErrorDetail { code: code.into(), message, sample_index: None, field, column: None } };
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    parts.headers.remove(axum::http::header::CONTENT_TYPE);
    let json = Json(body).into_response();
    let (json_parts, json_body) = json.into_parts();
    parts.headers.extend(json_parts.headers);
    Response::from_parts(parts, json_body)
}

/// `samples[3].power_w` → (Some(3), Some("power_w")); other paths are returned as the field.
fn split_sample_path(path: &str) -> (Option<usize>, Option<String>) {
    let parsed = path.strip_prefix("samples[").and_then(|rest| {
        let (index, field) = rest.split_once(']')?;
        Some((index.parse().ok()?, field.trim_start_matches('.').to_string()))
    });
    match parsed {
        Some((index, field)) => (Some(index), (!field.is_empty()).then_some(field)),
        None => (None, Some(path.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::{ApiError, parse_json, split_sample_path};

    #[test]
    fn unparseable_bodies_name_a_real_field_or_none() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Body {
            host: String,
            n: Option<u32>,
        }
        let field = |json: &str| match parse_json::<Body>(json.as_bytes()) {
            Err(ApiError::InvalidJson { path, .. }) => path,
            other => panic!("{json}: {other:?}"),
        };
        assert_eq!(field(r#"{"host": "a", "n": "x"}"#), Some("n".into()));
        assert_eq!(field(r#"{"#), None);
        assert_eq!(field(r#"{"host": "a",}"#), None);
        assert_eq!(field(r#"{"host": "a"} x"#), None);
    }

    #[test]
    fn sample_paths_split_into_index_and_field() {
        assert_eq!(split_sample_path("samples[3].power_w"), (Some(3), Some("power_w".into())));
        assert_eq!(split_sample_path("samples[0].processes[1].pid"), (Some(0), Some("processes[1].pid".into())));
        assert_eq!(split_sample_path("samples[12]"), (Some(12), None));
        assert_eq!(split_sample_path("host"), (None, Some("host".into())));
    }
}
