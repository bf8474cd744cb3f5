//! Herald's trigger sandbox: runs user-supplied JavaScript trigger functions in QuickJS (through
//! the `rquickjs` crate), with limits on memory, time and stack, and access to the database only
//! through a [`Host`] the caller implements.
//!
//! A trigger is the source of one function expression, `function (event, db) { ... }` or
//! `(event, db) => { ... }`. [`Sandbox::check`] refuses source that does not compile to a function
//! when the trigger is defined; [`Sandbox::run`] calls the function with the event (a JSON value,
//! such as `{op, before, after}`) and a `db` object whose methods call the host synchronously:
//!
//! ```text
//! db.get(collection, id)            -> document or null
//! db.query({collection, filter?, sort?, skip?, limit?})  -> array of documents
//! db.put(collection, id, doc)       -> undefined
//! db.insert(collection, doc)        -> id (string)
//! db.update(collection, id, update) -> undefined
//! db.delete(collection, id)         -> undefined
//! ```
//!
//! # Design
//!
//! **A runtime per worker.** A QuickJS runtime is a heap with its own garbage collector, atom table
//! and limits; creating one costs far more than a run. A [`Sandbox`] owns one runtime and is meant
//! to live as long as a worker thread, handling that worker's runs one at a time. It is `Send` (it
//! can be built on one thread and moved to its worker; this relies on rquickjs's `parallel`
//! feature), and `run` and `check` take `&mut self`, since a runtime runs one script at a time.
//!
//! **A fresh context per run.** Each call gets a new context, that is new global object and new
//! built-ins, so nothing one trigger stores in `globalThis` or in a patched prototype is seen by the
//! next; the source is evaluated again each time, which for trigger-sized functions costs
//! microseconds. After a run the context is dropped and the runtime's garbage collector is run so
//! every run starts from the same heap. A run that timed out or ran out of memory, or that leaves
//! jobs queued, gets the runtime replaced afterwards, so a damaged runtime is never reused.
//!
//! **Limits** ([`Limits`]): memory is counted by the runtime's allocator, a thin layer over Rust's
//! global allocator that refuses to hold more than `memory_bytes_max` and records the refusal. QuickJS
//! turns a refused allocation into `InternalError: out of memory` (or, when even that error cannot be
//! allocated, `null`); because the refusal itself is recorded, a run it ends is reported as
//! [`ScriptError::OutOfMemory`] whatever the script made of the error. A string grown past QuickJS's
//! maximum length (2^30 - 1 characters, which ropes reach without holding the memory) counts as out
//! of memory too. Time is a deadline checked by the runtime's interrupt handler, which QuickJS calls
//! every few thousand instructions: past the deadline the script is stopped with an exception it
//! cannot catch, reported as [`ScriptError::Timeout`]. Host calls count toward the time but are not
//! interrupted. The stack limit makes deep recursion throw a `RangeError`.
//!
//! **JSON.** Values cross the boundary as JSON text through the engine's own `JSON.parse` and
//! `JSON.stringify`, so JavaScript's rules apply (key order kept, `undefined` members dropped,
//! `toJSON` honoured, non-finite numbers become `null`). Integral numbers within ±(2^53 - 1) arrive
//! as JSON integers and all others as floats; floats are bit-exact both ways (serde_json's
//! `float_roundtrip` is enabled).
//!
//! **What a script can reach.** The ECMAScript built-ins (`Object`, `Array`, `JSON`, `Math`,
//! `Date`, `RegExp`, `Map`, `Set`, typed arrays, `Promise`, `Proxy`, `Reflect`, `eval`, ...), a
//! `console` whose methods discard their arguments, its `event` and its `db`. There is no module
//! loader (`import()` rejects, there is no `require`), no `std` or `os` module, no timers, and nothing
//! that touches files, the network, the clock beyond `Date`, or the process. Scripts run in strict
//! mode.
//!
//! **Errors.** Every failure is a [`ScriptError`] with a stable [`code`](ScriptError::code). Wrong
//! arguments to a `db` method throw a `TypeError` into the script. A [`HostError`] is thrown into the
//! script as an `Error` with message `"<code>: <message>"` and a `code` property; if the script lets
//! it escape, the run fails with [`ScriptError::Host`] carrying the host's original error.
//!
//! **Async functions.** A function may return a promise (an `async` function may `await` `db`
//! calls, which resolve at once). The job queue runs until it settles, within the time limit; a
//! rejection fails the run like a throw, and a promise that can never settle is an error.
//!
//! # Example
//!
//! ```
//! use herald_script::{Host, HostError, Limits, Sandbox};
//! use serde_json::{json, Value};
//!
//! /// A host that only records what was put.
//! #[derive(Default)]
//! struct Recorder(Vec<(String, String, Value)>);
//!
//! impl Host for Recorder {
//!     fn get(&mut self, _: &str, _: &str) -> Result<Option<Value>, HostError> {
//!         Ok(None)
//!     }
//!     fn query(&mut self, _: &Value) -> Result<Vec<Value>, HostError> {
//!         Ok(vec![])
//!     }
//!     fn put(&mut self, collection: &str, id: &str, doc: Value) -> Result<(), HostError> {
//!         self.0.push((collection.into(), id.into(), doc));
//!         Ok(())
//!     }
//!     fn insert(&mut self, _: &str, _: Value) -> Result<String, HostError> {
//!         Err(HostError::new("unsupported", "insert"))
//!     }
//!     fn update(&mut self, _: &str, _: &str, _: Value) -> Result<(), HostError> {
//!         Err(HostError::new("unsupported", "update"))
//!     }
//!     fn delete(&mut self, _: &str, _: &str) -> Result<(), HostError> {
//!         Err(HostError::new("unsupported", "delete"))
//!     }
//! }
//!
//! let mut sandbox = Sandbox::new(Limits::default())?;
//! let source = r#"function (event, db) {
//!     db.put("audit", event.after._id, {op: event.op, total: event.after.qty * event.after.price});
//! }"#;
//! sandbox.check(source)?;
//! let mut host = Recorder::default();
//! let event = json!({"op": "insert", "after": {"_id": "o1", "qty": 3, "price": 2.5}});
//! sandbox.run(source, &event, &mut host)?;
//! assert_eq!(host.0, [("audit".into(), "o1".into(), json!({"op": "insert", "total": 7.5}))]);
//! # Ok::<(), herald_script::ScriptError>(())
//! ```

mod error;
mod host;
mod json;
mod memory;
mod sandbox;

pub use error::ScriptError;
pub use host::{Host, HostError};
pub use json::SAFE_INTEGER_MAX;
pub use sandbox::{Limits, Sandbox, MEMORY_BYTES_MAX, STACK_BYTES_MAX, TIME_MS_MAX};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_is_send() {
        fn is_send<T: Send>() {}
        is_send::<Sandbox>();
        is_send::<ScriptError>();
    }

    #[test]
    fn default_limits_use_the_named_constants() {
        let limits = Limits::default();
        assert_eq!(limits.memory_bytes_max, 32 * 1024 * 1024);
        assert_eq!(limits.time_ms_max, 1000);
        assert_eq!(limits.stack_bytes_max, 512 * 1024);
    }
}
