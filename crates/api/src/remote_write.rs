//! Prometheus remote write 1.0: the protobuf messages of `POST /api/v1/write`, as Prometheus'
//! `prompb/types.proto` and `prompb/remote.proto` define them, derived with prost (no protoc
//! build step). Only the fields Fleetlens reads are declared: prost skips the others
//! (`WriteRequest.metadata`, `TimeSeries.exemplars` and `.histograms`) without decoding them.
//! The body on the wire is this `WriteRequest`, snappy-compressed (block format).

/// `prometheus.Label`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `prometheus.Sample`: a value at a Unix-millisecond timestamp.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PromSample {
    #[prost(double, tag = "1")]
    pub value: f64,
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// `prometheus.TimeSeries`: its labels (`__name__` is the metric) and samples.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<PromSample>,
}

/// `prometheus.WriteRequest`. The server does not decode it whole (see the server's
/// `remote_write` module): senders (tests, the benchmark) build it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
}

/// `WriteRequest.timeseries`'s field number.
pub const TIMESERIES_FIELD: u32 = 1;

impl TimeSeries {
    /// A series named `name` with `labels` and `(timestamp ms, value)` points.
    pub fn new(name: &str, labels: &[(&str, &str)], points: &[(i64, f64)]) -> Self {
        let mut l = vec![Label { name: "__name__".into(), value: name.into() }];
        l.extend(labels.iter().map(|(k, v)| Label { name: (*k).into(), value: (*v).into() }));
        TimeSeries {
            labels: l,
            samples: points.iter().map(|&(timestamp, value)| PromSample { value, timestamp }).collect(),
        }
    }

    /// The value of label `name`.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels.iter().find(|l| l.name == name).map(|l| l.value.as_str())
    }
}
