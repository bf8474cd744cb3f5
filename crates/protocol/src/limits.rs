//! The protocol's limits that both sides must know (`testdata/protocol/limits.json` carries
//! them to the TypeScript SDK).

/// Writes in one commit or WebSocket write request (the database enforces the same number:
/// `herald_db::COMMIT_WRITES_MAX`, checked equal by a server test).
pub const COMMIT_WRITES_MAX: usize = 500;
/// Longest client-chosen subscription id.
pub const SUB_ID_BYTES_MAX: usize = 128;
/// Longest client-chosen write request id.
pub const REQ_ID_BYTES_MAX: usize = 128;
/// Largest client message on a WebSocket.
pub const WS_MESSAGE_BYTES_MAX: usize = 256 << 10;

/// The limits as `testdata/protocol/limits.json` holds them.
pub fn limits_json() -> serde_json::Value {
    serde_json::json!({
        "COMMIT_WRITES_MAX": COMMIT_WRITES_MAX,
        "SUB_ID_BYTES_MAX": SUB_ID_BYTES_MAX,
        "REQ_ID_BYTES_MAX": REQ_ID_BYTES_MAX,
        "WS_MESSAGE_BYTES_MAX": WS_MESSAGE_BYTES_MAX,
    })
}
