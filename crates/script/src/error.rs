//! [`ScriptError`], its stable codes, and how a JavaScript exception caught at the end of a run is
//! classified and described.

use rquickjs::{Coerced, Ctx, Exception, Value};

use crate::host::HostError;

/// Why a trigger function could not be checked or did not run to completion.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    /// The source is not a function expression, or has a syntax error.
    #[error("trigger source does not compile: {0}")]
    Compile(String),
    /// The run took longer than its time limit, in milliseconds.
    #[error("trigger exceeded its time limit of {0} ms")]
    Timeout(u64),
    /// The run allocated more than its memory limit.
    #[error("trigger exceeded its memory limit")]
    OutOfMemory,
    /// The function threw (or returned a promise that rejected or never settled). The text holds the
    /// error's name and message and, when there is one, its stack.
    #[error("trigger threw: {0}")]
    Thrown(String),
    /// A host call failed and the script let the error propagate: the host's own error.
    #[error("trigger host call failed: {0}")]
    Host(HostError),
    /// The engine failed in a way that is not the script's doing.
    #[error("script engine failure: {0}")]
    Internal(String),
}

impl ScriptError {
    /// A stable, machine-readable code for the variant. For [`ScriptError::Host`] the host's own code
    /// is in the carried [`HostError`].
    pub fn code(&self) -> &'static str {
        match self {
            ScriptError::Compile(_) => "script_compile",
            ScriptError::Timeout(_) => "script_timeout",
            ScriptError::OutOfMemory => "script_memory",
            ScriptError::Thrown(_) => "script_error",
            ScriptError::Host(_) => "script_host",
            ScriptError::Internal(_) => "script_internal",
        }
    }
}

/// Classifies an error returned by the engine inside a run. `Error::Exception` takes the pending
/// exception from the context; the caller has already ruled out a timeout.
pub(crate) fn from_engine<'js>(
    ctx: &Ctx<'js>,
    err: rquickjs::Error,
    host_error: Option<HostError>,
) -> ScriptError {
    match err {
        rquickjs::Error::Exception => from_thrown(ctx, &ctx.catch(), host_error),
        rquickjs::Error::Allocation => ScriptError::OutOfMemory,
        other => ScriptError::Internal(other.to_string()),
    }
}

/// Classifies a thrown value: a string past QuickJS's maximum length, the host error the last host
/// call threw (let through uncaught), or anything else the script threw.
///
/// A refused allocation is recognised by the sandbox from its allocator, not from the thrown value
/// (which may even be `null` when memory is that tight). But QuickJS builds concatenations as ropes
/// that share their halves, so `s += s` grows a string to its maximum length (2^30 - 1 characters)
/// while holding almost no memory; the error it then throws stands for a request of a gigabyte or
/// more and counts as running out of memory too.
pub(crate) fn from_thrown<'js>(
    ctx: &Ctx<'js>,
    thrown: &Value<'js>,
    host_error: Option<HostError>,
) -> ScriptError {
    let fields = ErrorFields::of(thrown);
    if fields.is_string_too_long() {
        return ScriptError::OutOfMemory;
    }
    if let Some(host_error) = host_error {
        if fields.is_host_error(&host_error) {
            return ScriptError::Host(host_error);
        }
    }
    ScriptError::Thrown(describe(ctx, thrown, &fields))
}

/// The fields of a thrown `Error` object that classification looks at. Reading them may run a
/// getter the script defined; a getter that throws just leaves the field empty.
#[derive(Default)]
struct ErrorFields {
    is_error: bool,
    name: Option<String>,
    message: Option<String>,
    code: Option<String>,
    stack: Option<String>,
}

impl ErrorFields {
    fn of(thrown: &Value<'_>) -> ErrorFields {
        let Some(obj) = thrown.as_object() else {
            return ErrorFields::default();
        };
        let text = |key: &str| -> Option<String> {
            match obj.get::<_, Option<Coerced<String>>>(key) {
                Ok(v) => v.map(|c| c.0),
                Err(_) => {
                    // A throwing getter leaves an exception pending: drop it.
                    let _ = obj.ctx().catch();
                    None
                }
            }
        };
        let is_error = Exception::from_object(obj.clone()).is_some();
        ErrorFields {
            is_error,
            name: text("name"),
            message: text("message"),
            code: if is_error { text("code") } else { None },
            stack: if is_error { text("stack") } else { None },
        }
    }

    /// QuickJS's errors for a string longer than its maximum (`JS_STRING_LEN_MAX`).
    fn is_string_too_long(&self) -> bool {
        self.is_error
            && matches!(
                (self.name.as_deref(), self.message.as_deref()),
                (Some("InternalError"), Some("string too long"))
                    | (Some("RangeError"), Some("invalid string length"))
            )
    }

    /// Whether this is the error a host call threw (or one indistinguishable from it).
    fn is_host_error(&self, host_error: &HostError) -> bool {
        self.is_error
            && self.code.as_deref() == Some(host_error.code.as_str())
            && self.message.as_deref() == Some(host_error.to_string().as_str())
    }
}

/// Text for a thrown value: `Name: message` plus the stack for errors, else `String(value)`
/// (JSON for plain objects, so `throw {a: 1}` reads `{"a":1}` rather than `[object Object]`).
fn describe<'js>(ctx: &Ctx<'js>, thrown: &Value<'js>, fields: &ErrorFields) -> String {
    if fields.is_error {
        let name = fields.name.as_deref().unwrap_or("Error");
        let mut text = match fields.message.as_deref() {
            Some(message) if !message.is_empty() => format!("{name}: {message}"),
            _ => name.to_string(),
        };
        if let Some(stack) = fields.stack.as_deref().map(str::trim_end) {
            if !stack.is_empty() {
                text.push('\n');
                text.push_str(stack);
            }
        }
        return text;
    }
    if thrown.is_object() && !thrown.is_function() {
        if let Ok(Some(json)) = ctx.json_stringify(thrown.clone()) {
            if let Ok(json) = json.to_string() {
                return json;
            }
        }
        let _ = ctx.catch();
    }
    match thrown.get::<Coerced<String>>() {
        Ok(s) => s.0,
        Err(_) => {
            let _ = ctx.catch();
            format!("a value of type {}", thrown.type_name())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rquickjs::{Context, Runtime};

    fn thrown(src: &str, host_error: Option<HostError>) -> ScriptError {
        let rt = Runtime::new().unwrap();
        let ctx = Context::full(&rt).unwrap();
        ctx.with(|ctx| {
            let err = ctx.eval::<Value, _>(src).unwrap_err();
            from_engine(&ctx, err, host_error)
        })
    }

    #[test]
    fn codes_are_stable() {
        let cases = [
            (ScriptError::Compile(String::new()), "script_compile"),
            (ScriptError::Timeout(1), "script_timeout"),
            (ScriptError::OutOfMemory, "script_memory"),
            (ScriptError::Thrown(String::new()), "script_error"),
            (
                ScriptError::Host(HostError::new("not_found", "x")),
                "script_host",
            ),
            (ScriptError::Internal(String::new()), "script_internal"),
        ];
        for (err, code) in cases {
            assert_eq!(err.code(), code);
        }
    }

    #[test]
    fn errors_are_described_with_name_message_and_stack() {
        let ScriptError::Thrown(text) =
            thrown("function f() { throw new TypeError('boom') } f()", None)
        else {
            panic!("not Thrown");
        };
        assert!(text.starts_with("TypeError: boom\n"), "{text}");
        assert!(text.contains("at f"), "{text}");
    }

    #[test]
    fn non_errors_are_described_by_value() {
        assert_eq!(
            thrown("throw 'plain'", None),
            ScriptError::Thrown("plain".into())
        );
        assert_eq!(thrown("throw 42", None), ScriptError::Thrown("42".into()));
        assert_eq!(
            thrown("throw {a: 1}", None),
            ScriptError::Thrown(r#"{"a":1}"#.into())
        );
        assert_eq!(
            thrown("throw null", None),
            ScriptError::Thrown("null".into())
        );
        let getter = "throw {get toJSON() { throw 1 }, toString() { return 's' }}";
        assert_eq!(thrown(getter, None), ScriptError::Thrown("s".into()));
    }

    #[test]
    fn a_string_past_the_maximum_length_is_out_of_memory() {
        assert_eq!(
            thrown("let s = 'x'; while (true) s += s;", None),
            ScriptError::OutOfMemory
        );
        assert_eq!(
            thrown("'ab'.repeat(2 ** 30)", None),
            ScriptError::OutOfMemory
        );
        assert!(matches!(
            thrown("'ab'.repeat(-1)", None),
            ScriptError::Thrown(_)
        ));
    }

    #[test]
    fn a_host_error_is_recognised_by_code_and_message() {
        let host = HostError::new("not_found", "no doc");
        let src = "const e = new Error('not_found: no doc'); e.code = 'not_found'; throw e";
        assert_eq!(
            thrown(src, Some(host.clone())),
            ScriptError::Host(host.clone())
        );
        let other = "const e = new Error('not_found: other'); e.code = 'not_found'; throw e";
        assert!(matches!(thrown(other, Some(host)), ScriptError::Thrown(_)));
    }
}
