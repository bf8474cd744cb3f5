//! The host interface: the [`Host`] trait the database implements, and the script's `db` object
//! whose methods check their arguments, convert them to JSON and call the host.
//!
//! The host is a `&mut dyn Host` borrowed for one [`Sandbox::run`](crate::Sandbox::run). JavaScript
//! functions must outlive any Rust borrow the type system can see, so the borrow is parked in a
//! [`HostSlot`] as a raw pointer for exactly the duration of the run (see [`HostLease`]). Each call
//! takes the pointer out of the slot while it uses it, so two calls can never hold it at once, and a
//! `db` function that outlives its run finds the slot empty and throws.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::rc::Rc;

use rquickjs::function::Rest;
use rquickjs::{Ctx, Exception, Function, Object, Value};
use serde_json::Value as Json;

use crate::json;

/// What a trigger function may do to the database. Implemented by the caller (the database layer);
/// every method is synchronous.
///
/// A failed call returns a [`HostError`]; the script sees it as a thrown JavaScript `Error` whose
/// message is `"<code>: <message>"` and whose `code` property is the code. If the script does not
/// catch it, [`Sandbox::run`](crate::Sandbox::run) returns [`ScriptError::Host`](crate::ScriptError::Host)
/// with the original error.
pub trait Host {
    /// The document `id` of `collection`, or `None` when there is none.
    fn get(&mut self, collection: &str, id: &str) -> Result<Option<Json>, HostError>;
    /// `spec` is `{collection, filter?, sort?, skip?, limit?}` exactly as the script passed it.
    fn query(&mut self, spec: &Json) -> Result<Vec<Json>, HostError>;
    /// Stores `doc` as document `id` of `collection`, replacing any previous one.
    fn put(&mut self, collection: &str, id: &str, doc: Json) -> Result<(), HostError>;
    /// Inserts `doc` and returns its id (generated when `doc` has no `_id`).
    fn insert(&mut self, collection: &str, doc: Json) -> Result<String, HostError>;
    /// Applies the update operators in `update` to document `id` of `collection`.
    fn update(&mut self, collection: &str, id: &str, update: Json) -> Result<(), HostError>;
    /// Deletes document `id` of `collection`.
    fn delete(&mut self, collection: &str, id: &str) -> Result<(), HostError>;
}

/// A failed host call: a stable machine-readable `code` (such as `not_found`) and a human `message`
/// that does not repeat the code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostError {
    pub code: String,
    pub message: String,
}

impl HostError {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> HostError {
        HostError {
            code: code.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for HostError {}

/// Where the `db` functions of one run find the host, and the last host error they threw.
#[derive(Default)]
pub(crate) struct HostSlot {
    host: Cell<Option<NonNull<dyn Host>>>,
    last_error: RefCell<Option<HostError>>,
}

/// Keeps a host in a [`HostSlot`] while it lives; empties the slot when dropped, even on unwinding.
pub(crate) struct HostLease<'a> {
    slot: Rc<HostSlot>,
    _host: PhantomData<&'a mut dyn Host>,
}

impl HostSlot {
    /// Parks `host` in the slot until the returned lease is dropped. The lease holds the mutable
    /// borrow, so nothing else can touch the host meanwhile.
    pub(crate) fn lease<'a>(self: &Rc<Self>, host: &'a mut dyn Host) -> HostLease<'a> {
        let ptr: NonNull<dyn Host + 'a> = NonNull::from(host);
        // SAFETY: only the trait object's lifetime bound changes (same layout). The pointer is
        // dereferenced only by `call`, only while it sits in the slot, and `HostLease::drop` removes
        // it before `'a` ends, so it is never used after the borrow it came from.
        let ptr: NonNull<dyn Host> =
            unsafe { std::mem::transmute::<NonNull<dyn Host + 'a>, NonNull<dyn Host>>(ptr) };
        *self.last_error.borrow_mut() = None;
        self.host.set(Some(ptr));
        HostLease {
            slot: Rc::clone(self),
            _host: PhantomData,
        }
    }

    /// The last error a host call threw into the script, if any.
    pub(crate) fn last_error(&self) -> Option<HostError> {
        self.last_error.borrow().clone()
    }

    /// Runs `f` on the host. A host error is thrown into the script as an `Error` with a `code`.
    fn call<'js, T>(
        &self,
        ctx: &Ctx<'js>,
        f: impl FnOnce(&mut dyn Host) -> Result<T, HostError>,
    ) -> rquickjs::Result<T> {
        let Some(mut ptr) = self.host.take() else {
            return Err(Exception::throw_internal(
                ctx,
                "db is not available outside its trigger run",
            ));
        };
        // SAFETY: the pointer came from a live `&mut dyn Host` held by a `HostLease` (see `lease`),
        // and taking it out of the slot makes this the only reference until it is put back.
        let result = f(unsafe { ptr.as_mut() });
        self.host.set(Some(ptr));
        result.map_err(|err| self.throw(ctx, err))
    }

    fn throw<'js>(&self, ctx: &Ctx<'js>, err: HostError) -> rquickjs::Error {
        let exception = match Exception::from_message(ctx.clone(), &err.to_string()) {
            Ok(exception) => exception,
            Err(e) => return e,
        };
        if let Err(e) = exception.as_object().set("code", err.code.as_str()) {
            return e;
        }
        *self.last_error.borrow_mut() = Some(err);
        exception.throw()
    }
}

impl Drop for HostLease<'_> {
    fn drop(&mut self) {
        self.slot.host.set(None);
    }
}

/// Builds the `db` object handed to the trigger function.
pub(crate) fn db_object<'js>(ctx: &Ctx<'js>, slot: &Rc<HostSlot>) -> rquickjs::Result<Object<'js>> {
    let db = Object::new(ctx.clone())?;

    let s = Rc::clone(slot);
    method(ctx, &db, "get", move |ctx, args| {
        let collection = string_arg(&ctx, &args, 0, "get", "collection")?;
        let id = string_arg(&ctx, &args, 1, "get", "id")?;
        match s.call(&ctx, |h| h.get(&collection, &id))? {
            Some(doc) => json::to_js(&ctx, &doc),
            None => Ok(Value::new_null(ctx)),
        }
    })?;

    let s = Rc::clone(slot);
    method(ctx, &db, "query", move |ctx, args| {
        let spec = object_arg(&ctx, &args, 0, "query", "spec")?;
        if !spec.get("collection").is_some_and(Json::is_string) {
            return Err(Exception::throw_type(
                &ctx,
                "db.query: spec.collection must be a string",
            ));
        }
        let docs = s.call(&ctx, |h| h.query(&spec))?;
        json::to_js(&ctx, &Json::Array(docs))
    })?;

    let s = Rc::clone(slot);
    method(ctx, &db, "put", move |ctx, args| {
        let collection = string_arg(&ctx, &args, 0, "put", "collection")?;
        let id = string_arg(&ctx, &args, 1, "put", "id")?;
        let doc = object_arg(&ctx, &args, 2, "put", "doc")?;
        s.call(&ctx, |h| h.put(&collection, &id, doc))?;
        Ok(Value::new_undefined(ctx))
    })?;

    let s = Rc::clone(slot);
    method(ctx, &db, "insert", move |ctx, args| {
        let collection = string_arg(&ctx, &args, 0, "insert", "collection")?;
        let doc = object_arg(&ctx, &args, 1, "insert", "doc")?;
        let id = s.call(&ctx, |h| h.insert(&collection, doc))?;
        Ok(rquickjs::String::from_str(ctx, &id)?.into_value())
    })?;

    let s = Rc::clone(slot);
    method(ctx, &db, "update", move |ctx, args| {
        let collection = string_arg(&ctx, &args, 0, "update", "collection")?;
        let id = string_arg(&ctx, &args, 1, "update", "id")?;
        let update = object_arg(&ctx, &args, 2, "update", "update")?;
        s.call(&ctx, |h| h.update(&collection, &id, update))?;
        Ok(Value::new_undefined(ctx))
    })?;

    let s = Rc::clone(slot);
    method(ctx, &db, "delete", move |ctx, args| {
        let collection = string_arg(&ctx, &args, 0, "delete", "collection")?;
        let id = string_arg(&ctx, &args, 1, "delete", "id")?;
        s.call(&ctx, |h| h.delete(&collection, &id))?;
        Ok(Value::new_undefined(ctx))
    })?;

    Ok(db)
}

/// Defines `db[name]` as a Rust function taking any number of arguments.
fn method<'js, F>(ctx: &Ctx<'js>, db: &Object<'js>, name: &str, f: F) -> rquickjs::Result<()>
where
    F: Fn(Ctx<'js>, Vec<Value<'js>>) -> rquickjs::Result<Value<'js>> + 'js,
{
    let function = Function::new(
        ctx.clone(),
        move |ctx: Ctx<'js>, Rest(args): Rest<Value<'js>>| f(ctx, args),
    )?
    .with_name(name)?;
    db.set(name, function)
}

/// Argument `index` as a string; anything else (including a missing argument) is a `TypeError`.
fn string_arg<'js>(
    ctx: &Ctx<'js>,
    args: &[Value<'js>],
    index: usize,
    method: &str,
    name: &str,
) -> rquickjs::Result<String> {
    match args.get(index) {
        Some(v) => match v.as_string() {
            Some(s) => s.to_string(),
            None => Err(Exception::throw_type(
                ctx,
                &format!("db.{method}: {name} must be a string, not {}", type_name(v)),
            )),
        },
        None => Err(Exception::throw_type(
            ctx,
            &format!("db.{method}: missing argument {name}"),
        )),
    }
}

/// Argument `index` as a JSON object (converted as by `JSON.stringify`); anything else is a `TypeError`.
fn object_arg<'js>(
    ctx: &Ctx<'js>,
    args: &[Value<'js>],
    index: usize,
    method: &str,
    name: &str,
) -> rquickjs::Result<Json> {
    let Some(value) = args.get(index) else {
        return Err(Exception::throw_type(
            ctx,
            &format!("db.{method}: missing argument {name}"),
        ));
    };
    let kind = type_name(value);
    match json::from_js(ctx, value.clone())? {
        Some(json @ Json::Object(_)) => Ok(json),
        _ => Err(Exception::throw_type(
            ctx,
            &format!("db.{method}: {name} must be an object, not {kind}"),
        )),
    }
}

/// A JavaScript-flavoured name for the type of `v`, for error messages.
fn type_name(v: &Value<'_>) -> &'static str {
    if v.is_null() {
        "null"
    } else if v.is_array() {
        "array"
    } else if v.is_function() {
        "function"
    } else {
        v.type_name()
    }
}
