//! The span model every tailguard component shares: what the lab's collector receives, what the
//! simulator exports and what the Jaeger file holds (docs/traces.md).
//!
//! It follows Jaeger's data model (a trace is spans plus the processes that emitted them) rather
//! than OTLP's nesting by resource and scope, because the consumers (the Jaeger UI and the tuner's
//! critical-path search) want a flat list of spans per trace, each naming its service.

/// One trace: its spans and the processes (services) that emitted them.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    /// The 128-bit W3C trace id.
    pub id: u128,
    /// Every process a span of this trace points at, by index.
    pub processes: Vec<Process>,
    /// The spans, in no particular order.
    pub spans: Vec<Span>,
}

/// A process: the service a span ran in, and tags describing that instance.
#[derive(Clone, Debug, PartialEq)]
pub struct Process {
    /// The service's name (OTLP's `service.name`, Jaeger's `serviceName`).
    pub service: String,
    /// The other resource attributes.
    pub tags: Vec<Tag>,
}

/// One span.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    /// The 64-bit span id; never 0.
    pub id: u64,
    /// The span this one is a child of, if any (it may belong to a process that did not report).
    pub parent: Option<u64>,
    /// Index into the trace's `processes`.
    pub process: usize,
    /// What the span did (`ingress`, `egress backend`, `frontend`, `attempt`...).
    pub operation: String,
    /// Start, in microseconds since the Unix epoch (the simulator: since the run's start).
    pub start_us: u64,
    /// Duration in microseconds.
    pub duration_us: u64,
    /// Attributes.
    pub tags: Vec<Tag>,
}

/// A key and its typed value.
#[derive(Clone, Debug, PartialEq)]
pub struct Tag {
    /// The attribute's name.
    pub key: String,
    /// Its value.
    pub value: Value,
}

/// A tag's value: Jaeger's `string`, `bool`, `int64` and `float64` types.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Text.
    Str(String),
    /// A flag.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A floating-point number.
    Float(f64),
}

impl Tag {
    /// A tag of any value type that converts into [`Value`].
    pub fn new(key: impl Into<String>, value: impl Into<Value>) -> Tag {
        Tag { key: key.into(), value: value.into() }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Str(s.to_string())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::Str(s)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Value {
        Value::Int(i)
    }
}

impl From<u32> for Value {
    fn from(i: u32) -> Value {
        Value::Int(i64::from(i))
    }
}

impl From<f64> for Value {
    fn from(f: f64) -> Value {
        Value::Float(f)
    }
}

impl Trace {
    /// The value of tag `key` on `span`, if set.
    pub fn tag<'a>(span: &'a Span, key: &str) -> Option<&'a Value> {
        span.tags.iter().find(|t| t.key == key).map(|t| &t.value)
    }

    /// The service `span` ran in.
    pub fn service(&self, span: &Span) -> &str {
        self.processes.get(span.process).map_or("", |p| p.service.as_str())
    }

    /// The spans without a parent in this trace (normally one: the root).
    pub fn roots(&self) -> impl Iterator<Item = &Span> {
        self.spans.iter().filter(|s| s.parent.is_none_or(|p| !self.spans.iter().any(|o| o.id == p)))
    }

    /// The children of span `id`, in start order.
    pub fn children(&self, id: u64) -> Vec<&Span> {
        let mut children: Vec<&Span> = self.spans.iter().filter(|s| s.parent == Some(id)).collect();
        children.sort_by_key(|s| (s.start_us, s.id));
        children
    }

    /// The index of the process for `service` with `tags`, added if new.
    pub fn process_index(&mut self, service: &str, tags: &[Tag]) -> usize {
        match self.processes.iter().position(|p| p.service == service && p.tags == tags) {
            Some(i) => i,
            None => {
                self.processes.push(Process { service: service.to_string(), tags: tags.to_vec() });
                self.processes.len() - 1
            }
        }
    }
}

impl Value {
    /// The value as text, if it is text.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The value as an integer, if it is one.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }
}
