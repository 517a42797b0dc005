//! Reading API answers: serde_json parses the text into a [`Json`] tree, and the answer's type is
//! read from that tree through [`JsonRef`], a `Deserializer` that only ever hands a struct a map.
//!
//! Why not `serde_json::from_str::<T>` directly: serde's derived code for a struct has two ways
//! in, from a JSON object (`visit_map`) and from a JSON array (`visit_seq`), and serde_json's text
//! deserializer can take either, so both are compiled for every answer type, each with the
//! parser's whitespace and punctuation handling inlined. The API never sends a struct as an
//! array: with this deserializer `visit_seq` of a struct is unreachable and the wasm optimiser
//! drops it, and walking a parsed tree is a few instructions per field. The parser itself (one
//! instantiation, for [`Json`]) is shared by all pages (docs/BENCHMARKS.md has the sizes).
//!
//! [`Json`] rather than `serde_json::Value`: its objects are vectors of entries whose keys and
//! strings borrow from the text where they have no escapes, so building it allocates one vector
//! per object and array instead of a B-tree node and a `String` per key. Reading 10,000 samples
//! (8 MB) natively: 13.7 ms on serde_json's direct path, 25.7 ms through the tree, 35.2 ms
//! through `Value` (the `bench` module below; docs/BENCHMARKS.md).

use std::borrow::Cow;
use std::fmt;

use serde::de::value::{MapAccessDeserializer, StrDeserializer};
use serde::de::{
    self, Deserialize, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Unexpected, Visitor,
};
use serde::forward_to_deserialize_any;
use serde_json::Error;

/// Parses `text` as JSON and reads a `T` from it.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    let tree: Json<'_> = serde_json::from_str(text)?;
    T::deserialize(JsonRef(&tree))
}

/// A parsed JSON value whose strings borrow from the text where they can.
#[derive(Debug)]
pub enum Json<'a> {
    Null,
    Bool(bool),
    U64(u64),
    I64(i64),
    F64(f64),
    Str(Cow<'a, str>),
    Array(Vec<Json<'a>>),
    /// Entries in the order of the text.
    Object(Vec<(Cow<'a, str>, Json<'a>)>),
}

impl<'de> Deserialize<'de> for Json<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Json<'de>, E> {
        Ok(Json::Null)
    }

    fn visit_none<E>(self) -> Result<Json<'de>, E> {
        Ok(Json::Null)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Json<'de>, D::Error> {
        Json::deserialize(d)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Json<'de>, E> {
        Ok(Json::Bool(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Json<'de>, E> {
        Ok(Json::U64(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Json<'de>, E> {
        Ok(Json::I64(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Json<'de>, E> {
        Ok(Json::F64(v))
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Json<'de>, E> {
        Ok(Json::Str(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Json<'de>, E> {
        Ok(Json::Str(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Json<'de>, E> {
        Ok(Json::Str(Cow::Owned(v)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json<'de>, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json<'de>, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Json<'de>>()? {
            let Json::Str(key) = key else { return Err(de::Error::custom("an object key is not a string")) };
            entries.push((key, map.next_value()?));
        }
        Ok(Json::Object(entries))
    }
}

/// A borrowed [`Json`] value as a `Deserializer` (strings are copied into the result).
#[derive(Clone, Copy)]
struct JsonRef<'a>(&'a Json<'a>);

fn unexpected<'a>(v: &'a Json<'_>) -> Unexpected<'a> {
    match v {
        Json::Null => Unexpected::Unit,
        Json::Bool(b) => Unexpected::Bool(*b),
        Json::U64(n) => Unexpected::Unsigned(*n),
        Json::I64(n) => Unexpected::Signed(*n),
        Json::F64(n) => Unexpected::Float(*n),
        Json::Str(s) => Unexpected::Str(s),
        Json::Array(_) => Unexpected::Seq,
        Json::Object(_) => Unexpected::Map,
    }
}

/// `Deserializer` methods that read their type the way another method does.
macro_rules! read_as {
    ($($($method:ident)+ => $target:ident;)+) => {
        $($(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
                self.$target(visitor)
            }
        )+)+
    };
}

impl<'de> de::Deserializer<'de> for JsonRef<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Json::Null => visitor.visit_unit(),
            Json::Bool(b) => visitor.visit_bool(*b),
            Json::U64(n) => visitor.visit_u64(*n),
            Json::I64(n) => visitor.visit_i64(*n),
            Json::F64(n) => visitor.visit_f64(*n),
            Json::Str(s) => visitor.visit_str(s),
            Json::Array(items) => visitor.visit_seq(Elements(items.iter())),
            Json::Object(entries) => visitor.visit_map(Entries { entries: entries.iter(), value: None }),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Json::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    /// Only from an object, as a map: the one line that keeps every struct's `visit_seq` out of
    /// the wasm.
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_map(visitor)
    }

    /// A unit variant as its name (`"firing"`), any other variant as `{"name": value}`.
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Json::Str(s) => visitor.visit_enum(IntoDeserializer::<Error>::into_deserializer(&**s)),
            Json::Object(entries) if entries.len() == 1 => {
                visitor.visit_enum(MapAccessDeserializer::new(Entries { entries: entries.iter(), value: None }))
            }
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _name: &'static str, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    /// A field the dashboard does not read is skipped without walking it.
    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    // The types the API's answers are made of, each from the one or two kinds of JSON value it
    // can be read from: smaller per field type than `deserialize_any`'s dispatch to every
    // `visit_*` (each of them compiled, if only to refuse).
    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Json::Bool(b) => visitor.visit_bool(*b),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Json::U64(n) => visitor.visit_u64(*n),
            Json::I64(n) => visitor.visit_i64(*n),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Json::F64(n) => visitor.visit_f64(*n),
            Json::U64(n) => visitor.visit_u64(*n),
            Json::I64(n) => visitor.visit_i64(*n),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Json::Str(s) => visitor.visit_str(s),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Json::Array(items) => visitor.visit_seq(Elements(items.iter())),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Json::Object(entries) => visitor.visit_map(Entries { entries: entries.iter(), value: None }),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    // Integers of every width are read as `deserialize_i64` reads them (the visitor checks the
    // range, as serde_json's does), `f32` as `f64`, an owned string as a borrowed one.
    read_as! {
        deserialize_i8 deserialize_i16 deserialize_i32 deserialize_u8 deserialize_u16 deserialize_u32
        deserialize_u64 => deserialize_i64;
        deserialize_f32 => deserialize_f64;
        deserialize_string => deserialize_str;
    }

    forward_to_deserialize_any! {
        i128 u128 char bytes byte_buf unit unit_struct tuple tuple_struct identifier
    }
}

struct Elements<'a>(std::slice::Iter<'a, Json<'a>>);

impl<'de> SeqAccess<'de> for Elements<'_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Error> {
        self.0.next().map(|v| seed.deserialize(JsonRef(v))).transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

struct Entries<'a> {
    entries: std::slice::Iter<'a, (Cow<'a, str>, Json<'a>)>,
    /// The value of the key just read.
    value: Option<&'a Json<'a>>,
}

impl<'de> MapAccess<'de> for Entries<'_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        let Some((key, value)) = self.entries.next() else { return Ok(None) };
        self.value = Some(value);
        let key: StrDeserializer<'_, Error> = (&**key).into_deserializer();
        seed.deserialize(key).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        match self.value.take() {
            Some(v) => seed.deserialize(JsonRef(v)),
            None => Err(de::Error::custom("a map value was asked for before its key")),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use fleetlens_api::{FleetSummary, GpuList};
    use fleetlens_core::{GpuProcess, ProcessOwner, Sample};
    use serde::{Deserialize, Serialize};

    use super::from_str;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Kind {
        Slack,
        Webhook { url: String },
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Inner {
        n: u32,
        x: f64,
        k: Kind,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Outer {
        name: String,
        id: i64,
        ok: bool,
        missing: Option<String>,
        null: Option<i64>,
        #[serde(default)]
        defaulted: Vec<u8>,
        items: Vec<Inner>,
        labels: BTreeMap<String, String>,
        #[serde(rename = "type")]
        kind: Kind,
    }

    #[test]
    fn reads_what_serde_json_reads() {
        let text = r#"{"name":"a\"b\u00e9\ud83d\ude00","id":-7,"ok":true,"null":null,"unknown":{"deep":[1,{"x":2}]},
            "items":[{"n":3,"x":2,"k":"slack"},{"n":0,"x":-0.5e1,"k":{"webhook":{"url":"http://h"}}}],
            "labels":{"team":"ml"},"type":"slack"}"#;
        let ours: Outer = from_str(text).unwrap();
        let theirs: Outer = serde_json::from_str(text).unwrap();
        assert_eq!(ours, theirs);
        assert_eq!(ours.name, "a\"bé😀");
        assert_eq!(ours.items[0].x, 2.0);
        assert_eq!(ours.items[1].x, -5.0);
        assert_eq!(ours.missing, None);
        assert!(ours.defaulted.is_empty());
    }

    #[test]
    fn refuses_what_the_type_does_not_allow() {
        let cases = [
            r#"{"n":-1,"x":0,"k":"slack"}"#,         // negative into u32
            r#"{"n":4294967296,"x":0,"k":"slack"}"#, // too large for u32
            r#"{"n":1,"x":"0","k":"slack"}"#,        // string for a number
            r#"{"n":1.5,"x":0,"k":"slack"}"#,        // fraction for an integer
            r#"{"n":true,"x":0,"k":"slack"}"#,       // boolean for a number
            r#"{"n":1,"x":null,"k":"slack"}"#,       // null for a number
            r#"{"n":1,"x":0,"k":"email"}"#,          // unknown variant
            r#"{"n":1,"x":0}"#,                      // missing field
            r#"[1,0,"slack"]"#,                      // a struct as an array
            r#"{"n":1,"x":0,"k":"slack""#,           // truncated
        ];
        for text in cases {
            assert!(from_str::<Inner>(text).is_err(), "accepted {text}");
            if !text.starts_with('[') {
                assert!(serde_json::from_str::<Inner>(text).is_err(), "serde_json accepted {text}");
            }
        }
    }

    /// The API's own answer types as the server writes them, read as serde_json reads them.
    #[test]
    fn reads_the_api_types_as_serde_json_does() {
        let summary = r#"{"from_ms":1,"to_ms":3600001,"gpu_count":2,"paid_gpu_hours":2.0,"allocated_gpu_hours":1.5,
            "funnel":[{"level":"allocation","fraction":0.75,"coverage":1.0,"gap_cost":0.5},{"level":"mfu","fraction":null,"coverage":null,"gap_cost":null}],
            "hours_by_state":{"idle":0.5,"productive":1.5},"currency":"USD","price_source":"prices set in Settings",
            "cost":4.0,"wasted_cost":1.25,"wasted_cost_by_state":{"idle":1.0},"projected_monthly_waste":900.0,
            "unpriced_gpu_hours":0.0,"unpriced_models":[],"energy_kwh":1.2,"energy_kwh_by_state":{},
            "top_wasters":[{"uuid":"GPU-1","host":"h1","name":"NVIDIA H200","main_waste_state":"idle","paid_gpu_hours":1.0,
                "wasted_cost":1.0,"wasted_hours":0.5,"efficiency":null,"advice":"Release it.",
                "right_size":{"suggested_model":"l4","p95_sm_active_pct":12.5,"peak_mem_bytes":1073741824,"saving_per_month":300.0}}],
            "top_owners":[{"owner":"alice","gpus":1,"gpu_hours":1.0,"idle_held_hours":0.5,"hollow_hours":0.0,"cost":2.0,"wasted_cost":1.0}],
            "top_owners_from_ms":1}"#;
        let ours: FleetSummary = from_str(summary).unwrap();
        assert_eq!(ours, serde_json::from_str::<FleetSummary>(summary).unwrap());
        assert_eq!(ours.top_wasters[0].right_size.as_ref().unwrap().peak_mem_bytes, 1 << 30);

        let process = GpuProcess {
            pid: 4242,
            used_bytes: Some(8 << 30),
            sm_pct: Some(97.5),
            command: Some("python train.py".into()),
            owner: Some(ProcessOwner { user: Some("alice".into()), ..ProcessOwner::default() }),
            ..GpuProcess::default()
        };
        let sample = Sample {
            ts_ms: 1_700_000_000_000,
            gpu_util_pct: Some(100.0),
            sm_active_pct: Some(12.25),
            mem_used_bytes: Some(-1),
            processes: Some(vec![process]),
            ..Sample::default()
        };
        let list = serde_json::json!({"gpus": [{
            "uuid": "GPU-1", "host": "h1", "gpu_index": 0, "name": "NVIDIA H200", "mem_total_bytes": 150_000_000_000_i64,
            "power_limit_w": 700.0, "first_seen_ms": 1, "last_seen_ms": 2, "latest": sample, "efficiency": 12.25, "state": "hollow"
        }]})
        .to_string();
        let ours: GpuList = from_str(&list).unwrap();
        assert_eq!(ours, serde_json::from_str::<GpuList>(&list).unwrap());
        assert_eq!(ours.gpus[0].latest.as_ref().unwrap(), &sample);
    }
}

/// How long reading the two largest answers takes this way and serde_json's direct way (a
/// benchmark, not run by CI): `cargo test --release -p fleetlens-frontend bench_parse -- --ignored
/// --nocapture`. Figures in docs/BENCHMARKS.md.
#[cfg(test)]
mod bench {
    use std::time::Instant;

    use fleetlens_api::{GpuList, SampleList};
    use fleetlens_core::{GpuProcess, ProcessOwner, Sample};
    use serde::de::DeserializeOwned;

    fn time<T: DeserializeOwned + PartialEq>(what: &str, text: &str) {
        let mut best = [f64::MAX; 3];
        for _ in 0..5 {
            let t = Instant::now();
            let direct: T = serde_json::from_str(text).unwrap();
            let t1 = t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            let tree: T = super::from_str(text).unwrap();
            let t2 = t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            let value: serde_json::Value = serde_json::from_str(text).unwrap();
            let through_value = T::deserialize(&value).unwrap();
            let t3 = t.elapsed().as_secs_f64() * 1e3;
            assert!(direct == tree && tree == through_value);
            best = [best[0].min(t1), best[1].min(t2), best[2].min(t3)];
        }
        let [d, j, v] = best;
        println!(
            "{what} ({} bytes): serde_json {d:.1} ms, Json tree {j:.1} ms, serde_json::Value {v:.1} ms",
            text.len()
        );
    }

    #[test]
    #[ignore = "a benchmark"]
    fn bench_parse() {
        let owner = ProcessOwner { user: Some("alice".into()), ..ProcessOwner::default() };
        let process = GpuProcess {
            pid: 4242,
            used_bytes: Some(8 << 30),
            sm_pct: Some(97.5),
            command: Some("python train.py".into()),
            owner: Some(owner),
            ..GpuProcess::default()
        };
        let sample = Sample {
            ts_ms: 1_700_000_000_000,
            gpu_util_pct: Some(100.0),
            sm_active_pct: Some(12.25),
            sm_occupancy_pct: Some(33.3),
            tensor_active_pct: Some(1.5),
            dram_active_pct: Some(7.5),
            mem_used_bytes: Some(123_456_789),
            power_w: Some(345.6),
            temp_c: Some(55.0),
            processes: Some(vec![process]),
            ..Sample::default()
        };
        let gpus: Vec<_> = (0..1000)
            .map(|i| {
                serde_json::json!({"uuid": format!("GPU-{i}"), "host": format!("node-{}", i / 8), "gpu_index": i % 8,
                    "name": "NVIDIA H200", "mem_total_bytes": 150_000_000_000_i64, "power_limit_w": 700.0,
                    "first_seen_ms": 1, "last_seen_ms": 2, "latest": sample, "efficiency": 12.25, "state": "hollow"})
            })
            .collect();
        time::<GpuList>("GET /gpus, 1,000 GPUs", &serde_json::json!({ "gpus": gpus }).to_string());
        let samples = serde_json::json!({"uuid": "GPU-1", "from_ms": 0, "to_ms": 1, "truncated": false,
            "samples": vec![sample; 10_000]});
        time::<SampleList>("GET /gpus/{uuid}/samples, 10,000 samples", &samples.to_string());
    }
}
