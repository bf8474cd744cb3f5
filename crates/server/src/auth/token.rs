//! End-user JSON Web Tokens: verification with an HS256 secret and/or EdDSA (Ed25519) and ES256
//! (P-256) public keys from a PEM file. `exp` and `sub` are required, `nbf` is checked when
//! present, with no leeway: a token is valid until the second its `exp` names.

use herald_rules::AuthCtx;
use jsonwebtoken::{decode, decode_header, Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

/// Longest `sub` accepted.
pub const SUB_BYTES_MAX: usize = 256;
/// Largest token accepted, in bytes (before any decoding work).
pub const TOKEN_BYTES_MAX: usize = 16 << 10;

/// A verified end user.
#[derive(Debug, Clone, PartialEq)]
pub struct UserAuth {
    pub ctx: AuthCtx,
    /// When the token expires, in Unix milliseconds.
    pub expires_at_ms: u64,
}

/// Verifies tokens with the configured keys.
#[derive(Clone, Default)]
pub struct Verifier {
    hmac: Option<DecodingKey>,
    ed: Vec<DecodingKey>,
    ec: Vec<DecodingKey>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("hmac", &self.hmac.is_some())
            .field("ed", &self.ed.len())
            .field("ec", &self.ec.len())
            .finish()
    }
}

impl Verifier {
    /// `secret`: the HS256 secret (the bytes of the secret file, surrounding whitespace
    /// removed); `pem`: a file of `PUBLIC KEY` PEM blocks, each Ed25519 or P-256.
    pub fn new(secret: Option<&[u8]>, pem: Option<&[u8]>) -> Result<Verifier, String> {
        let mut v = Verifier::default();
        if let Some(s) = secret {
            if s.len() < 32 {
                return Err("the JWT secret must be at least 32 bytes".into());
            }
            v.hmac = Some(DecodingKey::from_secret(s));
        }
        if let Some(pem) = pem {
            let text = std::str::from_utf8(pem).map_err(|_| "the public keys file is not UTF-8")?;
            let mut found = 0;
            for block in text.split("-----BEGIN ").skip(1) {
                let block = format!("-----BEGIN {block}");
                let block = block.as_bytes();
                if let Ok(k) = DecodingKey::from_ed_pem(block) {
                    v.ed.push(k);
                } else if let Ok(k) = DecodingKey::from_ec_pem(block) {
                    v.ec.push(k);
                } else {
                    return Err(format!(
                        "public key {found} is neither an Ed25519 nor a P-256 PUBLIC KEY in PEM"
                    ));
                }
                found += 1;
            }
            if found == 0 {
                return Err("the public keys file holds no PEM block".into());
            }
        }
        Ok(v)
    }

    pub fn is_configured(&self) -> bool {
        self.hmac.is_some() || !self.ed.is_empty() || !self.ec.is_empty()
    }

    /// Verifies a token; the error says why it is refused (for the `unauthenticated` message;
    /// it never includes key material).
    /// `now_ms` is the server's clock (see [`check_times`]).
    pub fn verify(&self, token: &str, now_ms: u64) -> Result<UserAuth, String> {
        if token.len() > TOKEN_BYTES_MAX {
            return Err(format!("the token is over {TOKEN_BYTES_MAX} bytes"));
        }
        let header = decode_header(token).map_err(|e| format!("malformed token: {e}"))?;
        let keys: &[DecodingKey] = match header.alg {
            Algorithm::HS256 => self.hmac.as_slice(),
            Algorithm::EdDSA => &self.ed,
            Algorithm::ES256 => &self.ec,
            other => return Err(format!("tokens signed with {other:?} are not accepted")),
        };
        if keys.is_empty() {
            return Err(format!("no key is configured for {:?} tokens", header.alg));
        }
        let mut validation = Validation::new(header.alg);
        validation.leeway = 0;
        // `exp` and `nbf` are checked by `check_times` against the server's clock, not by the
        // library against the system's. `exp` must still be present and numeric (required).
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        validation.set_required_spec_claims(&["exp", "sub"]);
        let mut last = String::new();
        for key in keys {
            match decode::<Map<String, Value>>(token, key, &validation) {
                Ok(data) => {
                    check_times(&data.claims, now_ms)?;
                    return user_of(data.claims);
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(format!("invalid token: {last}"))
    }
}

/// A token is valid from its `nbf` (if any) until the second its `exp` names, both whole
/// seconds compared with `now_ms` without leeway: what the JWT library checks against the system
/// clock, with the same errors, checked here against the server's [`herald_db::Clock`].
fn check_times(claims: &Map<String, Value>, now_ms: u64) -> Result<(), String> {
    let now = now_ms / 1000;
    let secs = |name: &str| numeric_date(claims, name);
    if secs("exp")?.is_some_and(|exp| exp < now) {
        return Err("invalid token: ExpiredSignature".into());
    }
    if secs("nbf")?.is_some_and(|nbf| nbf > now) {
        return Err("invalid token: ImmatureSignature".into());
    }
    Ok(())
}

/// A time claim as the library reads a NumericDate: a non-negative number, rounded to whole
/// seconds (`None`: absent or null).
fn numeric_date(claims: &Map<String, Value>, name: &str) -> Result<Option<u64>, String> {
    match claims.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .or_else(|| {
                v.as_f64()
                    .filter(|f| f.is_finite() && *f >= 0.0 && *f < u64::MAX as f64)
                    .map(|f| f.round() as u64)
            })
            .map(Some)
            .ok_or_else(|| format!("invalid token: the '{name}' claim is not a NumericDate")),
    }
}

fn user_of(claims: Map<String, Value>) -> Result<UserAuth, String> {
    let uid = match claims.get("sub") {
        Some(Value::String(s)) if !s.is_empty() && s.len() <= SUB_BYTES_MAX => s.clone(),
        _ => {
            return Err(format!(
                "'sub' must be a string of 1 to {SUB_BYTES_MAX} bytes"
            ))
        }
    };
    // The expiry `check_times` accepted, rounded the same way: `exp` 0.4 s in the past rounds
    // to now and is accepted, so it must not read as already expired (found by the `jwt` fuzz
    // target's invariant).
    let exp = numeric_date(&claims, "exp")?.ok_or("'exp' must be a number")?;
    Ok(UserAuth {
        ctx: AuthCtx { uid, claims },
        expires_at_ms: exp.saturating_mul(1000),
    })
}
