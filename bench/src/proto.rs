//! How the parent (API server and writer) and a child (one measured informer)
//! talk: the child's job as JSON on its command line, results as JSON lines
//! on its stdout (prefixed with [`MSG_PREFIX`]), commands as JSON lines on
//! its stdin.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Prefix of the child's result lines on stdout.
pub const MSG_PREFIX: &str = "@@bench ";

/// Which library runs the informer, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Lib {
    /// kinformer's `Informer` (paginated lists, page size 500).
    Kinformer,
    /// kube-runtime 5: `watcher()` + `reflector()` (page size 500), or the
    /// shared store with `subscribe()` when the job has subscribers.
    KubeRuntime,
}

/// Dropping `metadata.managedFields` before caching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Strip {
    /// Keep everything.
    #[default]
    None,
    /// After decoding: kinformer's `transform`, kube-runtime's `modify`.
    AfterDecode,
    /// While decoding (kinformer's `skip_managed_fields`; kube-runtime cannot).
    AtDecode,
}

/// One informer configuration under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Variant {
    /// The library.
    pub lib: Lib,
    /// Streaming lists (`sendInitialEvents`) instead of paginated lists.
    pub streaming: bool,
    /// managedFields handling.
    pub strip: Strip,
    /// How kinformer's subscribers are subscribed (kinformer only).
    #[serde(default)]
    pub delivery: Delivery,
    /// Metadata only: kinformer's `Informer::metadata`, kube-runtime's
    /// `metadata_watcher()` (both cache `PartialObjectMeta<K>`).
    #[serde(default)]
    pub metadata: bool,
    /// kinformer's cache: decoded (`false`) or compact (`compact_cache`).
    #[serde(default)]
    pub compact: bool,
    /// A compact cache's `CompactOptions::recent` (objects kept decoded);
    /// `None`: the default.
    #[serde(default)]
    pub compact_recent: Option<usize>,
    /// kinformer only: an index `bucket` (the object's number / 1000, so
    /// 1000 objects per value), and after the sync a read probe: `get` of
    /// 1000 keys and `by_index` of one bucket, timed.
    #[serde(default)]
    pub indexed: bool,
    /// kinformer only: the informer on its own thread
    /// (`start_on_own_thread`), each subscriber an `EventStream` (`stream`,
    /// or `stream_batches` when batched) read by a task of a 2-worker tokio
    /// runtime, as kube-runtime's subscribers are.
    #[serde(default)]
    pub tokio_streams: bool,
    /// kinformer only: each subscriber an actor reading its `EventStream`
    /// in its own context (`ctx.add_stream`): on the informer's thread
    /// (`Some(0)`) or placed round-robin on `n` threads (`kinformer::Workers`).
    #[serde(default)]
    pub stream_actors: Option<usize>,
    /// kinformer only: the Reflector (requests and decoding) on an arbiter
    /// of its own (`InformerBuilder::reflector_thread`).
    #[serde(default)]
    pub reflector_thread: bool,
    /// kinformer only: list pages decoded at once
    /// (`InformerBuilder::list_decoders`); `None`: its default.
    #[serde(default)]
    pub list_decoders: Option<usize>,
}

/// The kinformer subscription call under test: one variant at a time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Delivery {
    /// `subscribe`: one event per call, the next when it returned.
    #[default]
    Each,
    /// `subscribe_pipelined`: one event per call, several in the mailbox.
    Pipelined,
    /// `subscribe_batches`: one `EventBatch` per call.
    Batched,
    /// `subscribe_fn`: a closure per event, its future awaited before the
    /// next; the informer on its own thread, the closures' task on a
    /// 2-worker tokio runtime.
    Closure,
    /// `subscribe_inline`: a function the listener calls in place, on the
    /// informer's thread. It cannot stall (it would stall the thread): not
    /// for the slow-subscriber workload.
    Inline,
}

impl Variant {
    /// kinformer with defaults.
    pub const KINFORMER: Variant = Variant {
        lib: Lib::Kinformer,
        streaming: false,
        strip: Strip::None,
        delivery: Delivery::Each,
        metadata: false,
        compact: false,
        compact_recent: None,
        indexed: false,
        tokio_streams: false,
        stream_actors: None,
        reflector_thread: false,
        list_decoders: None,
    };
    /// kube-runtime with defaults.
    pub const KUBE_RUNTIME: Variant = Variant {
        lib: Lib::KubeRuntime,
        streaming: false,
        strip: Strip::None,
        delivery: Delivery::Each,
        metadata: false,
        compact: false,
        compact_recent: None,
        indexed: false,
        tokio_streams: false,
        stream_actors: None,
        reflector_thread: false,
        list_decoders: None,
    };

    /// The same with streaming lists.
    pub const fn streaming(mut self) -> Self {
        self.streaming = true;
        self
    }

    /// The same with batched subscribers.
    pub const fn batched(mut self) -> Self {
        self.delivery = Delivery::Batched;
        self
    }

    /// The same with closure subscribers (see `Delivery::Closure`).
    pub const fn closures(mut self) -> Self {
        self.delivery = Delivery::Closure;
        self
    }

    /// Whether this variant's child runs a multi-thread tokio runtime (as
    /// kube-runtime's subscribers do) rather than an actix System.
    pub fn on_tokio_workers(&self) -> bool {
        self.lib == Lib::KubeRuntime || self.tokio_streams || self.delivery == Delivery::Closure
    }

    /// The same with inline handler functions (see `Delivery::Inline`).
    pub const fn inline(mut self) -> Self {
        self.delivery = Delivery::Inline;
        self
    }

    /// The same with pipelined subscribers.
    pub const fn pipelined(mut self) -> Self {
        self.delivery = Delivery::Pipelined;
        self
    }

    /// The same caching metadata only.
    pub const fn metadata(mut self) -> Self {
        self.metadata = true;
        self
    }

    /// The same with a compact cache, indexed and read-probed (see `indexed`).
    pub const fn compact(mut self) -> Self {
        self.compact = true;
        self.indexed = true;
        self
    }

    /// The same with a compact cache keeping `recent` objects decoded.
    pub const fn compact_recent(mut self, recent: usize) -> Self {
        self.compact_recent = Some(recent);
        self.compact()
    }

    /// The same with subscribers as streams read on tokio workers (see
    /// `tokio_streams`).
    pub const fn tokio_streams(mut self) -> Self {
        self.tokio_streams = true;
        self
    }

    /// The same with subscribers as actors reading streams, on `threads`
    /// threads of their own (0: the informer's thread; see `stream_actors`).
    pub const fn stream_actors(mut self, threads: usize) -> Self {
        self.stream_actors = Some(threads);
        self
    }

    /// The same with the Reflector on a thread of its own.
    pub const fn reflector_thread(mut self) -> Self {
        self.reflector_thread = true;
        self
    }

    /// The same with `n` list pages decoded at once (0: in place).
    pub const fn list_decoders(mut self, n: usize) -> Self {
        self.list_decoders = Some(n);
        self
    }

    /// The same indexed and read-probed (see `indexed`).
    pub const fn indexed(mut self) -> Self {
        self.indexed = true;
        self
    }

    /// The same with managedFields dropped.
    pub const fn strip(mut self, strip: Strip) -> Self {
        self.strip = strip;
        self
    }

    /// A short label for tables.
    pub fn label(&self) -> String {
        let mut s = match self.lib {
            Lib::Kinformer => "kinformer".to_string(),
            Lib::KubeRuntime => "kube-runtime".to_string(),
        };
        if self.streaming {
            s.push_str(" (streaming list)");
        }
        if self.metadata {
            s.push_str(" (metadata only)");
        }
        if let (true, Some(n)) = (self.compact, self.compact_recent) {
            s.push_str(&format!(" (compact cache, {n} kept decoded)"));
        } else if self.compact {
            s.push_str(" (compact cache)");
        } else if self.indexed {
            s.push_str(" (indexed)");
        }
        if self.tokio_streams {
            s.push_str(" (streams on 2 tokio workers)");
        }
        match self.stream_actors {
            None => {}
            Some(0) => s.push_str(" (actors reading streams)"),
            Some(n) => s.push_str(&format!(" (actors reading streams on {n} worker threads)")),
        }
        if self.reflector_thread {
            s.push_str(" (reflector thread)");
        }
        match self.list_decoders {
            None => {}
            Some(0) => s.push_str(" (lists decoded in place)"),
            Some(n) => s.push_str(&format!(" ({n} list decoders)")),
        }
        match self.delivery {
            Delivery::Each => {}
            Delivery::Batched => s.push_str(" (batched subscribers)"),
            Delivery::Pipelined => s.push_str(" (pipelined subscribers)"),
            Delivery::Closure => s.push_str(" (closures on 2 tokio workers)"),
            Delivery::Inline => s.push_str(" (inline handlers)"),
        }
        match self.strip {
            Strip::None => {}
            Strip::AfterDecode => s.push_str(" (drop managedFields)"),
            Strip::AtDecode => s.push_str(" (skip managedFields at decode)"),
        }
        s
    }
}

/// How long a restarted kinformer child waits for the server to confirm its
/// restored cache: a resume is confirmed by the watch's first event or
/// bookmark, which a quiet server may send minutes later. Once the restored
/// informer relists (a 410), it waits for the relist's end instead.
pub const CONFIRM_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// The object type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// ~1.3 KB ConfigMaps.
    ConfigMap,
    /// ~6.8 KB Pods with managedFields.
    Pod,
}

impl Kind {
    /// The resource's plural.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configmaps",
            Kind::Pod => "pods",
        }
    }
}

/// Overflow policy of a subscriber (kinformer only; kube-runtime has one behaviour).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Bounded queue, back-pressure.
    #[default]
    Block,
    /// Merge per key.
    Coalesce,
}

/// A subscriber that stops handling events for a while.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stall {
    /// Milliseconds after `begin` at which it stalls.
    pub after_ms: u64,
    /// How long it stalls, in milliseconds.
    pub for_ms: u64,
}

/// One subscriber of the informer under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct SubSpec {
    /// Overflow policy.
    pub policy: Policy,
    /// Resync period in seconds (0 = never).
    pub resync_secs: u64,
    /// Stall, if any.
    pub stall: Option<Stall>,
    /// Left out of the "others" latency (the subscriber that stalls, in the
    /// run with the stall and in the one without, so both cover the same set).
    #[serde(default)]
    pub not_other: bool,
}

/// What a child process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Job {
    /// Initial sync: time, peak heap, steady heap.
    Sync,
    /// Fetch the same list pages raw, then time decoding them only.
    Decode,
    /// Subscribers measuring write-to-delivery latency between `begin` and `end`.
    Deliver,
    /// Sync, then count what a relist delivers between `begin` and `end`.
    Relist,
    /// A controller (kinformer's `Controller` or kube-runtime's) reconciling
    /// the namespace's ConfigMaps; see [`CtlSpec`].
    Controller,
}

/// The controller of a [`Job::Controller`] child.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CtlSpec {
    /// Reconciles at once (kinformer's workers, kube-runtime's concurrency).
    pub workers: usize,
    /// How long each reconcile awaits a timer, in µs (0: it returns at once).
    pub reconcile_us: u64,
    /// Record from the child's start (start-up runs) instead of from `begin`.
    pub record_from_start: bool,
}

impl Default for CtlSpec {
    fn default() -> Self {
        CtlSpec {
            workers: 8,
            reconcile_us: 1_000,
            record_from_start: false,
        }
    }
}

/// The job of one child process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChildSpec {
    /// What to run.
    pub job: Job,
    /// Which informer.
    pub variant: Variant,
    /// Which objects.
    pub kind: Kind,
    /// The API server.
    pub url: String,
    /// The namespace watched.
    pub namespace: String,
    /// Objects in the namespace at start.
    pub objects: usize,
    /// Page size of lists.
    pub page_size: u32,
    /// The subscribers (kube-runtime: none means plain `reflector()`).
    pub subscribers: Vec<SubSpec>,
    /// Capacity of each kinformer subscriber queue and of kube-runtime's shared-store buffer.
    pub capacity: usize,
    /// Non-zero: subscribers only count this many watch updates (throughput runs).
    #[serde(default)]
    pub count_to: u64,
    /// Also run a control watch: a plain kube watch on a thread of its own in
    /// the same process, recording the same write-to-receipt latencies.
    #[serde(default)]
    pub control_watch: bool,
    /// The controller, for [`Job::Controller`].
    #[serde(default)]
    pub controller: CtlSpec,
    /// kinformer only: keep the cache in a snapshot in this directory and
    /// start from it (`InformerBuilder::persist`, the restart workload).
    #[serde(default)]
    pub persist: Option<String>,
}

/// A command from the parent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Command {
    /// Start measuring (counters and peaks reset).
    Begin,
    /// The parent's writes are done: wait until every subscriber has seen
    /// `stamped` timestamped updates (at most `timeout_ms`), then report.
    End {
        /// Timestamped updates written since `begin`.
        stamped: u64,
        /// Deadline in milliseconds.
        timeout_ms: u64,
    },
    /// The outage is over: wait until the informer has re-synced to
    /// `objects` objects with the expected notifications, then report.
    EndRelist {
        /// Objects on the server now.
        objects: usize,
        /// Objects modified during the outage.
        modified: u64,
        /// Objects deleted during the outage.
        deleted: u64,
        /// Deadline in milliseconds.
        timeout_ms: u64,
    },
    /// The parent's writes are done (controller jobs): wait until every named
    /// object has been reconciled at a `data.counter` at least the one given,
    /// and at least `keys` distinct objects were reconciled (at most
    /// `timeout_ms`), then report.
    AwaitReconciled {
        /// Object name → the counter of its last write.
        counters: std::collections::BTreeMap<String, u64>,
        /// Distinct objects to have been reconciled since the child started.
        keys: usize,
        /// Deadline in milliseconds.
        timeout_ms: u64,
    },
}

/// A line from the child.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// `ready`, `report` or `error`.
    pub event: String,
    /// Its figures.
    pub data: Value,
}
