//! The one place the dashboard talks to the server: where the credential lives, the
//! `Authorization` header, and how a failure becomes a message a person can act on.
//!
//! Today the credential is an API key kept in `localStorage` and sent as a Bearer token. When
//! dashboard sessions arrive, only [`credential`], [`remember`], [`forget`] and [`send`] change.

use std::fmt;

use fleetlens_api::{BillingReport, ErrorBody, FleetSummary, GpuList, SampleList, Series, StateWindow};
use fleetlens_core::PriceTable;
use gloo_net::http::{Request, RequestBuilder};
use serde::de::DeserializeOwned;

use crate::wire::{AlertList, Channel, ChannelList, Prices, RuleList};

const KEY_STORAGE: &str = "fleetlens.api_key";
const PREFIX: &str = "/api/v1";

/// A failed API call, already worded for the person looking at the page.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status; 0 when the server could not be reached, or the answer could not be read.
    pub status: u16,
    /// The server's `error.code` (or `network` / `bad_response`).
    pub code: String,
    /// The server's `error.message`, or what went wrong locally.
    pub message: String,
    /// The API path asked for, without the query.
    pub path: String,
}

impl ApiError {
    pub fn is_unauthorized(&self) -> bool {
        self.status == 401
    }

    /// The server answered 404 for the endpoint itself (it is not built yet on that server).
    pub fn is_missing_endpoint(&self) -> bool {
        self.status == 404 && self.message == "no such API endpoint"
    }

    fn local(code: &str, path: &str, message: impl fmt::Display) -> ApiError {
        ApiError { status: 0, code: code.into(), message: message.to_string(), path: path.into() }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ApiError { status, code, message, path } = self;
        match (*status, code.as_str()) {
            (0, "network") => {
                write!(f, "Cannot reach the Fleetlens server ({message}). Retrying every 5 seconds.")
            }
            (0, "no_key") => write!(f, "Not logged in: enter an API key on the login page."),
            (0, _) => write!(f, "Unexpected answer from {path}: {message}"),
            (401, _) => write!(f, "The server did not accept the API key ({message}). Log in again."),
            (403, _) => write!(f, "This API key is not allowed to read this: {message}."),
            (404, _) if self.is_missing_endpoint() => {
                write!(f, "This server does not offer {path} yet.")
            }
            (404, _) => write!(f, "Not found: {message}."),
            (400 | 422, _) => write!(f, "The server refused the request: {message}."),
            (s, _) if s >= 500 => {
                write!(f, "The server failed (HTTP {s}: {message}). Retrying every 5 seconds.")
            }
            (s, _) => write!(f, "HTTP {s} from {path}: {message}"),
        }
    }
}

impl std::error::Error for ApiError {}

pub type ApiResult<T> = Result<T, ApiError>;

fn storage() -> Option<web_sys::Storage> {
    web_sys::window()?.local_storage().ok()?
}

/// The stored credential, if any.
pub fn credential() -> Option<String> {
    storage()?.get_item(KEY_STORAGE).ok()?.filter(|k| !k.trim().is_empty())
}

/// Keep a credential that [`verify`] accepted.
pub fn remember(key: &str) {
    if let Some(s) = storage() {
        let _ = s.set_item(KEY_STORAGE, key.trim());
    }
}

/// Log out.
pub fn forget() {
    if let Some(s) = storage() {
        let _ = s.remove_item(KEY_STORAGE);
    }
}

fn with_auth(req: RequestBuilder, path: &str, key: Option<&str>) -> ApiResult<RequestBuilder> {
    let stored;
    let key = match key {
        Some(k) => k,
        None => {
            stored = credential().ok_or_else(|| ApiError::local("no_key", path, "no API key"))?;
            stored.as_str()
        }
    };
    Ok(req.header("Authorization", &format!("Bearer {key}")).header("Accept", "application/json"))
}

/// Sends a request and returns the body text of a 2xx answer, or the mapped error.
async fn send(req: RequestBuilder, path: &str, key: Option<&str>, body: Option<String>) -> ApiResult<String> {
    let req = with_auth(req, path, key)?;
    let req = match body {
        Some(b) => req
            .header("Content-Type", "application/json")
            .body(b)
            .map_err(|e| ApiError::local("bad_request", path, e))?,
        None => req.build().map_err(|e| ApiError::local("bad_request", path, e))?,
    };
    let resp = req.send().await.map_err(|e| ApiError::local("network", path, e))?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| ApiError::local("network", path, e))?;
    if resp.ok() {
        return Ok(text);
    }
    Err(match serde_json::from_str::<ErrorBody>(&text) {
        Ok(b) => ApiError { status, code: b.error.code, message: b.error.message, path: path.into() },
        Err(_) => ApiError {
            status,
            code: "http".into(),
            message: if text.trim().is_empty() { resp.status_text() } else { text.chars().take(200).collect() },
            path: path.into(),
        },
    })
}

fn parse<T: DeserializeOwned>(text: &str, path: &str) -> ApiResult<T> {
    serde_json::from_str(text).map_err(|e| ApiError::local("bad_response", path, e))
}

async fn get<T: DeserializeOwned>(path: &str, query: &[(&str, String)]) -> ApiResult<T> {
    let text = get_text(path, query).await?;
    parse(&text, path)
}

async fn get_text(path: &str, query: &[(&str, String)]) -> ApiResult<String> {
    let url = format!("{PREFIX}{path}");
    let req = Request::get(&url).query(query.iter().map(|(k, v)| (*k, v.as_str())));
    send(req, &url, None, None).await
}

/// Encodes one path segment (GPU and MIG UUIDs are safe today; this keeps them so).
fn seg(s: &str) -> String {
    String::from(js_sys::encode_uri_component(s))
}

/// Checks a key before keeping it: any read endpoint will do.
pub async fn verify(key: &str) -> ApiResult<()> {
    let url = format!("{PREFIX}/gpus");
    send(Request::get(&url), &url, Some(key), None).await.map(|_| ())
}

/// `GET /api/v1/gpus`
pub async fn gpus() -> ApiResult<GpuList> {
    get("/gpus", &[]).await
}

/// `GET /api/v1/gpus/{uuid}/samples?from=&to=&limit=`
pub async fn samples(uuid: &str, from_ms: i64, to_ms: i64, limit: u32) -> ApiResult<SampleList> {
    let q = [("from", from_ms.to_string()), ("to", to_ms.to_string()), ("limit", limit.to_string())];
    get(&format!("/gpus/{}/samples", seg(uuid)), &q).await
}

/// `GET /api/v1/gpus/{uuid}/states?from=&to=&window_s=`
pub async fn states(uuid: &str, from_ms: i64, to_ms: i64, window_s: u32) -> ApiResult<Vec<StateWindow>> {
    let q = [("from", from_ms.to_string()), ("to", to_ms.to_string()), ("window_s", window_s.to_string())];
    get(&format!("/gpus/{}/states", seg(uuid)), &q).await
}

/// `GET /api/v1/fleet/summary?from=&to=`
pub async fn fleet_summary(from_ms: i64, to_ms: i64) -> ApiResult<FleetSummary> {
    get("/fleet/summary", &[("from", from_ms.to_string()), ("to", to_ms.to_string())]).await
}

/// `GET /api/v1/gpus/{uuid}/series?from=&to=&resolution=1m|1h` (rollups, for long ranges)
pub async fn series(uuid: &str, from_ms: i64, to_ms: i64, resolution: &str) -> ApiResult<Series> {
    let q = [("from", from_ms.to_string()), ("to", to_ms.to_string()), ("resolution", resolution.to_string())];
    get(&format!("/gpus/{}/series", seg(uuid)), &q).await
}

/// `GET /api/v1/alerts?status=`
pub async fn alerts(status: &str) -> ApiResult<AlertList> {
    get("/alerts", &[("status", status.to_string())]).await
}

/// `GET /api/v1/alert-rules`
pub async fn alert_rules() -> ApiResult<RuleList> {
    get("/alert-rules", &[]).await
}

/// `GET /api/v1/notification-channels`
pub async fn channels() -> ApiResult<ChannelList> {
    get("/notification-channels", &[]).await
}

async fn send_json<T: DeserializeOwned>(req: RequestBuilder, path: &str, body: String) -> ApiResult<T> {
    let text = send(req, path, None, Some(body)).await?;
    parse(&text, path)
}

/// `POST /api/v1/notification-channels`
pub async fn create_channel(name: &str, kind: &str, url: &str) -> ApiResult<Channel> {
    let path = format!("{PREFIX}/notification-channels");
    let body = serde_json::json!({ "name": name, "kind": kind, "url": url }).to_string();
    send_json(Request::post(&path), &path, body).await
}

/// `GET /api/v1/prices`
pub async fn prices() -> ApiResult<Prices> {
    get("/prices", &[]).await
}

/// `PUT /api/v1/prices`: the organisation's whole price table.
pub async fn put_prices(table: &PriceTable) -> ApiResult<Prices> {
    let path = format!("{PREFIX}/prices");
    let body = serde_json::to_string(table).map_err(|e| ApiError::local("bad_request", &path, e))?;
    send_json(Request::put(&path), &path, body).await
}

/// `GET /api/v1/reports/billing?from=&to=&group_by=&format=json`
pub async fn billing(from_ms: i64, to_ms: i64, group_by: &str) -> ApiResult<BillingReport> {
    get("/reports/billing", &billing_query(from_ms, to_ms, group_by, "json")).await
}

/// The same report as CSV text.
pub async fn billing_csv(from_ms: i64, to_ms: i64, group_by: &str) -> ApiResult<String> {
    get_text("/reports/billing", &billing_query(from_ms, to_ms, group_by, "csv")).await
}

fn billing_query(from_ms: i64, to_ms: i64, group_by: &str, format: &str) -> [(&'static str, String); 4] {
    [
        ("from", from_ms.to_string()),
        ("to", to_ms.to_string()),
        ("group_by", group_by.to_string()),
        ("format", format.to_string()),
    ]
}
