//! The [`Sandbox`]: one QuickJS runtime with its [`Limits`], a fresh context per call, and the
//! clock that interrupts a run past its deadline.

use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rquickjs::context::intrinsic::{
    Date, Eval, Json, MapSet, Promise, Proxy, RegExp, RegExpCompiler, TypedArrays,
};
use rquickjs::context::EvalOptions;
use rquickjs::promise::PromiseState;
use rquickjs::{Context, Ctx, Function, Object, Runtime, Value};

use crate::error::{self, ScriptError};
use crate::host::{self, Host, HostSlot};
use crate::json;
use crate::memory::{LimitedAllocator, MemoryGauge};

/// Default for [`Limits::memory_bytes_max`]: 32 MiB.
pub const MEMORY_BYTES_MAX: usize = 32 * 1024 * 1024;
/// Default for [`Limits::time_ms_max`]: one second.
pub const TIME_MS_MAX: u64 = 1000;
/// Default for [`Limits::stack_bytes_max`]: 512 KiB.
pub const STACK_BYTES_MAX: usize = 512 * 1024;

/// What one run may use. The calling thread's stack must be larger than `stack_bytes_max` plus the
/// Rust frames below the sandbox (Rust's default of 2 MiB for spawned threads is plenty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Heap the runtime may hold at once, counted by the sandbox's allocator beneath QuickJS
    /// (includes the runtime and the run's context, together under 200 KiB). `0` means no limit.
    pub memory_bytes_max: usize,
    /// Wall time from the start of a run, host calls included.
    pub time_ms_max: u64,
    /// Native stack JavaScript may use; deeper recursion throws a `RangeError`.
    pub stack_bytes_max: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            memory_bytes_max: MEMORY_BYTES_MAX,
            time_ms_max: TIME_MS_MAX,
            stack_bytes_max: STACK_BYTES_MAX,
        }
    }
}

/// The ECMAScript built-ins a context gets: no `performance`, `atob`, `WeakRef` or
/// `FinalizationRegistry` (whose callbacks could run during a later run), no `DOMException`.
type Intrinsics = (
    Date,
    Eval,
    RegExpCompiler,
    RegExp,
    Json,
    Proxy,
    MapSet,
    TypedArrays,
    Promise,
);

/// Runs trigger functions. Owns one QuickJS runtime, so keep one per worker thread. It is `Send`,
/// so it may be built elsewhere and moved to its worker; it runs one script at a time (`&mut self`).
pub struct Sandbox {
    limits: Limits,
    runtime: Runtime,
    clock: Arc<Clock>,
    memory: Arc<MemoryGauge>,
    /// Set when a damaged runtime could not be replaced; the next call tries again.
    stale: bool,
}

impl Sandbox {
    pub fn new(limits: Limits) -> Result<Sandbox, ScriptError> {
        let clock = Arc::new(Clock::new());
        let memory = Arc::new(MemoryGauge::default());
        let runtime = new_runtime(&limits, &clock, &memory)?;
        Ok(Sandbox {
            limits,
            runtime,
            clock,
            memory,
            stale: false,
        })
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Checks that `source` is a JavaScript function expression like `function (event, db) { ... }`
    /// or `(event, db) => { ... }`, without calling it. Used when a trigger is defined, to refuse bad
    /// source early with [`ScriptError::Compile`].
    ///
    /// The source is evaluated as an expression in a fresh context under the limits. For a function
    /// expression that runs no script code; anything else is confined like a run (no `db`, no event).
    pub fn check(&mut self, source: &str) -> Result<(), ScriptError> {
        self.execute(|ctx, _| compile(ctx, source).map(drop))
    }

    /// Evaluates `source` (a function expression) and calls it with `(event, db)`: `event` is the
    /// JSON value as a JavaScript object, `db` has `get(collection, id)`, `query(spec)`,
    /// `put(collection, id, doc)`, `insert(collection, doc)`, `update(collection, id, update)` and
    /// `delete(collection, id)`, which call `host`. The function's return value is ignored, except
    /// that a returned promise is awaited: the job queue runs until it settles, within the time
    /// limit, and a rejection is an error like a throw.
    pub fn run(
        &mut self,
        source: &str,
        event: &serde_json::Value,
        host: &mut dyn Host,
    ) -> Result<(), ScriptError> {
        let event =
            serde_json::to_string(event).map_err(|e| ScriptError::Internal(e.to_string()))?;
        let slot = Rc::new(HostSlot::default());
        let _lease = slot.lease(host);
        self.execute(|ctx, clock| {
            let function = compile(ctx, source)?;
            let engine = |e| error::from_engine(ctx, e, None);
            let event = json::parse(ctx, &event).map_err(engine)?;
            let db = host::db_object(ctx, &slot).map_err(engine)?;
            let returned: Value = function
                .call((event, db))
                .map_err(|e| error::from_engine(ctx, e, slot.last_error()))?;
            // Microtasks the function queued run now, while the host is still lent.
            while !clock.fired() && ctx.execute_pending_job() {}
            let Some(promise) = returned.as_promise() else {
                return Ok(());
            };
            match promise.state() {
                PromiseState::Resolved => Ok(()),
                PromiseState::Rejected => {
                    let err = promise.result::<Value>().and_then(Result::err);
                    let err = err.unwrap_or(rquickjs::Error::Exception);
                    Err(error::from_engine(ctx, err, slot.last_error()))
                }
                PromiseState::Pending => Err(ScriptError::Thrown(
                    "the promise returned by the trigger function never settled".to_string(),
                )),
            }
        })
    }

    /// Runs `body` in a fresh context under the deadline, then classifies a timeout and replaces
    /// the runtime if it may be damaged (a timeout, running out of memory, or jobs left queued).
    fn execute<F>(&mut self, body: F) -> Result<(), ScriptError>
    where
        F: for<'js> FnOnce(&Ctx<'js>, &Clock) -> Result<(), ScriptError>,
    {
        if self.stale {
            self.renew()?;
        }
        self.memory.reset();
        self.clock.arm(self.limits.time_ms_max);
        let result = match Context::custom::<Intrinsics>(&self.runtime) {
            Ok(context) => context.with(|ctx| {
                install_console(&ctx).map_err(|e| error::from_engine(&ctx, e, None))?;
                body(&ctx, &self.clock)
            }),
            Err(rquickjs::Error::Allocation) => Err(ScriptError::OutOfMemory),
            Err(e) => Err(ScriptError::Internal(e.to_string())),
        };
        let timed_out = self.clock.disarm();
        let out_of_memory = self.memory.exceeded();
        let result = match result {
            _ if timed_out => Err(ScriptError::Timeout(self.limits.time_ms_max)),
            // Whatever the script made of the refused allocation (caught it, threw something else,
            // or QuickJS could only throw `null`), running out of memory is why the run failed.
            Err(_) if out_of_memory => Err(ScriptError::OutOfMemory),
            result => result,
        };
        let failed_on_limits = matches!(
            result,
            Err(ScriptError::Timeout(_) | ScriptError::OutOfMemory)
        );
        if failed_on_limits || out_of_memory || self.runtime.is_job_pending() {
            // On failure `stale` stays set and the next call tries again, refusing to run if it
            // still cannot replace the runtime.
            self.stale = true;
            let _ = self.renew();
        } else {
            // Free this run's garbage (the context's built-ins form cycles) so that every run starts
            // from the same heap and the memory limit means the same thing each time.
            self.runtime.run_gc();
        }
        result
    }

    fn renew(&mut self) -> Result<(), ScriptError> {
        self.runtime = new_runtime(&self.limits, &self.clock, &self.memory)?;
        self.stale = false;
        Ok(())
    }
}

fn new_runtime(
    limits: &Limits,
    clock: &Arc<Clock>,
    memory: &Arc<MemoryGauge>,
) -> Result<Runtime, ScriptError> {
    let allocator = LimitedAllocator::new(limits.memory_bytes_max, Arc::clone(memory));
    let runtime = Runtime::new_with_alloc(allocator)
        .map_err(|e| ScriptError::Internal(format!("cannot create a JavaScript runtime: {e}")))?;
    runtime.set_max_stack_size(limits.stack_bytes_max);
    let clock = Arc::clone(clock);
    runtime.set_interrupt_handler(Some(Box::new(move || clock.expired())));
    Ok(runtime)
}

/// Evaluates `source` as one parenthesised expression and requires a function.
fn compile<'js>(ctx: &Ctx<'js>, source: &str) -> Result<Function<'js>, ScriptError> {
    let mut options = EvalOptions::default();
    options.strict = true;
    options.filename = Some("trigger".to_string());
    // The newline lets a trailing line comment end before the closing parenthesis.
    let value = match ctx.eval_with_options::<Value, _>(format!("({source}\n)"), options) {
        Ok(value) => value,
        Err(rquickjs::Error::Exception) => {
            // A syntax error, or top-level code that threw: either way the source is refused.
            let thrown = ctx.catch();
            return Err(match error::from_thrown(ctx, &thrown, None) {
                ScriptError::Thrown(text) => ScriptError::Compile(text),
                other => other,
            });
        }
        Err(rquickjs::Error::InvalidString(_)) => {
            return Err(ScriptError::Compile(
                "the source contains a NUL character".to_string(),
            ))
        }
        Err(e) => return Err(error::from_engine(ctx, e, None)),
    };
    let kind = if value.is_null() {
        "null"
    } else {
        value.type_name()
    };
    value.into_function().ok_or_else(|| {
        ScriptError::Compile(format!(
            "the source must be a function expression such as `function (event, db) {{ ... }}`, \
             but it evaluates to a value of type {kind}"
        ))
    })
}

/// A `console` whose methods accept anything and print nothing, so scripts that log still run.
fn install_console(ctx: &Ctx<'_>) -> rquickjs::Result<()> {
    let console = Object::new(ctx.clone())?;
    let discard = Function::new(ctx.clone(), || ())?;
    for name in ["log", "info", "warn", "error", "debug"] {
        console.set(name, discard.clone())?;
    }
    ctx.globals().set("console", console)
}

/// The deadline of the current run, read by the runtime's interrupt handler. Shared with the
/// handler through an `Arc` because the handler must be `Send` like the runtime.
pub(crate) struct Clock {
    origin: Instant,
    /// Nanoseconds after `origin`; `u64::MAX` while no run is in progress.
    deadline_ns: AtomicU64,
    fired: AtomicBool,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            origin: Instant::now(),
            deadline_ns: AtomicU64::new(u64::MAX),
            fired: AtomicBool::new(false),
        }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX - 1)
    }

    fn arm(&self, time_ms_max: u64) {
        let deadline = self
            .now_ns()
            .saturating_add(time_ms_max.saturating_mul(1_000_000));
        self.fired.store(false, Ordering::Relaxed);
        self.deadline_ns
            .store(deadline.min(u64::MAX - 1), Ordering::Relaxed);
    }

    /// Ends the run; returns whether the deadline interrupted it.
    fn disarm(&self) -> bool {
        self.deadline_ns.store(u64::MAX, Ordering::Relaxed);
        self.fired.swap(false, Ordering::Relaxed)
    }

    /// Called by QuickJS every few thousand instructions: `true` interrupts the script with an
    /// exception it cannot catch.
    fn expired(&self) -> bool {
        let deadline = self.deadline_ns.load(Ordering::Relaxed);
        if deadline != u64::MAX && self.now_ns() >= deadline {
            self.fired.store(true, Ordering::Relaxed);
            return true;
        }
        false
    }

    pub(crate) fn fired(&self) -> bool {
        self.fired.load(Ordering::Relaxed)
    }
}
