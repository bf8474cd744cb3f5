//! Who a WebSocket is: its principal (from the upgrade's `Authorization: Bearer`, or from a
//! first message `{"op":"auth","token":"..."}` within [`WS_AUTH_TIMEOUT`]), when an end user's
//! token expires, renewal by another `auth` message; and the connection's message rate limit.
//!
//! When a token expires unrenewed the connection gets `token_expired` and closes, and nothing
//! is sent after the expiry instant.

use crate::api::error::ApiError;
use crate::api::live::error_msg;
use crate::api::live::ws::Next;
use crate::auth::Principal;
use crate::state::AppState;
use herald_db::Clock;
use herald_protocol::{ErrorCode, ServerMessage};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::time::Duration;

/// With authentication on, a WebSocket must authenticate within this long of opening.
pub const WS_AUTH_TIMEOUT: Duration = Duration::from_secs(10);
/// A write to a WebSocket that makes no progress for this long (on the database's clock: the
/// client stopped reading) drops the connection.
pub const WS_SEND_STALL: Duration = Duration::from_secs(30);
/// A WebSocket without subscriptions that sends nothing for this long is closed.
pub const WS_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Client messages per second a WebSocket may send, sustained...
pub const WS_MESSAGES_PER_SEC: f64 = 200.0;
/// ...and in a burst. Past that the connection gets `rate_limited` and is closed.
pub const WS_MESSAGES_BURST: f64 = 1000.0;

/// A token bucket for client messages.
pub struct RateLimit {
    tokens: f64,
    at: tokio::time::Instant,
}

impl Default for RateLimit {
    fn default() -> RateLimit {
        RateLimit::new()
    }
}

impl RateLimit {
    pub fn new() -> RateLimit {
        RateLimit {
            tokens: WS_MESSAGES_BURST,
            at: tokio::time::Instant::now(),
        }
    }

    pub fn take(&mut self) -> bool {
        let now = tokio::time::Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * WS_MESSAGES_PER_SEC;
        self.tokens = (self.tokens + refill).min(WS_MESSAGES_BURST);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The authentication state of one WebSocket.
#[derive(Default)]
pub struct Session {
    pub principal: Option<Principal>,
    /// When the end user's token expires, in Unix milliseconds on the database's clock
    /// (`None`: keys, open mode, or not yet authenticated).
    pub expires_at_ms: Option<u64>,
    /// The API key the connection authenticated with, re-checked when a key is revoked.
    pub key: Option<String>,
}

impl Session {
    pub fn set(&mut self, p: Principal, credential: Option<&str>) {
        self.key = match p {
            Principal::Admin | Principal::Service => credential.map(str::to_string),
            Principal::Open | Principal::User(_) => None,
        };
        self.expires_at_ms = p.user().map(|u| u.expires_at_ms);
        self.principal = Some(p);
    }

    pub fn expired(&self, clock: &Clock) -> bool {
        self.expires_at_ms.is_some_and(|at| clock.now_ms() >= at)
    }
}

/// Completes once `clock` reads `at_ms` or later: a timer for the time left, re-armed whenever a
/// manual clock advances (so a test's advance expires a token at once, without sleeping).
pub async fn reached(clock: &Clock, at_ms: u64) {
    // A timer further out than this is re-armed when it fires (keeps `Instant` arithmetic
    // far from overflow for tokens that never expire in practice).
    const TIMER_MAX: Duration = Duration::from_secs(365 * 24 * 3600);
    loop {
        // Taken before reading the time, so an advance in between is not missed.
        let advanced = clock.advanced();
        let left = at_ms.saturating_sub(clock.now_ms());
        if left == 0 {
            return;
        }
        let timer = tokio::time::sleep(Duration::from_millis(left).min(TIMER_MAX));
        tokio::select! {
            _ = timer => {}
            _ = advanced => {}
        }
    }
}

/// The claims that identify a user's rights: all but the token's own lifetime and id.
fn stable_claims(p: &Principal) -> Option<Map<String, Value>> {
    p.user().map(|u| {
        let mut c = u.ctx.claims.clone();
        for k in ["exp", "iat", "nbf", "jti"] {
            c.remove(k);
        }
        c
    })
}

/// An `auth` message that failed: a first one closes the connection; a failed renewal leaves
/// the current token in force until it expires.
pub fn auth_failed(session: &Session, e: ApiError) -> (Option<ServerMessage<'static>>, Next) {
    if session.principal.is_none() {
        (
            None,
            Next::Close(Some(error_msg(None, &e)), "authentication failed"),
        )
    } else {
        (Some(error_msg(None, &e)), Next::Continue)
    }
}

/// `{"op":"auth","token":"..."}`: authenticates the connection or renews its token.
pub fn auth_message(
    st: &AppState,
    session: &mut Session,
    token: &str,
) -> (Option<ServerMessage<'static>>, Next) {
    let p = match st.auth.authenticate(Some(token)) {
        Ok(p) => p,
        Err(e) => return auth_failed(session, ApiError::new(ErrorCode::Unauthenticated, e.0)),
    };
    if let Some(cur) = &session.principal {
        let same_user = match (cur, &p) {
            (Principal::User(a), Principal::User(b)) => a.ctx.uid == b.ctx.uid,
            (a, b) => a == b,
        };
        if !same_user || stable_claims(cur) != stable_claims(&p) {
            let e = ApiError::new(
                ErrorCode::Unauthenticated,
                "a renewal must carry the same identity and claims; reconnect to change them",
            );
            return (
                None,
                Next::Close(Some(error_msg(None, &e)), "identity changed"),
            );
        }
    }
    let (uid, expires_at) = match &p {
        Principal::User(u) => (Some(Cow::Owned(u.ctx.uid.clone())), Some(u.expires_at_ms)),
        _ => (None, None),
    };
    session.set(p, Some(token));
    (
        Some(ServerMessage::Auth {
            ok: true,
            uid,
            expires_at,
        }),
        Next::Continue,
    )
}
