// Herald's client SDK: typed references, queries in Herald's MongoDB query language, writes
// with latency compensation and a durable offline queue, and live snapshots with Firestore's
// `docChanges()` shape. No runtime dependencies; works in browsers and in Node 20 (pass the `ws`
// package as `WebSocket`, and `FilePersistence` from `@herald/sdk/node` for a durable queue).
export {
  connect,
  PENDING_WRITES_MAX,
  CACHE_DOCS_MAX,
  Herald,
  CollectionGroupRef,
  CollectionRef,
  DocumentRef,
  QueryRef,
  type ConnectOptions,
  type Write,
  type WriteResult,
  type CommitResult,
  type ListenOptions,
} from "./client/client.js";
export type {
  QuerySnapshot,
  DocumentSnapshot,
  DocumentChange,
  SnapshotMetadata,
  ChangeType,
  ChangeKind,
} from "./client/snapshot.js";
export { HeraldError } from "./client/errors.js";
export type { AggregateSnapshot, PipelineSource, RowChange } from "./client/pipelineListens.js";
export {
  parsePrometheus,
  type CollectionInfo,
  type Explained,
  type TriggerStatus,
  type TriggerError,
  type DeadLetter,
  type MetricSample,
  type ClusterStatus,
  type NodeStatus,
  type NodeRole,
  type GridStatus,
  type GridCell,
} from "./client/admin.js";
export {
  backoffDelay,
  type ConnectionState,
  type WebSocketLike,
  type WebSocketConstructor,
  type BackoffOptions,
} from "./client/sync.js";
export { MemoryPersistence, type Persistence, type StoredMutation, type CachedDoc } from "./client/persistence.js";
export { IndexedDbPersistence } from "./client/indexeddb.js";
export type { WireWrite } from "./protocol.js";
export {
  Query,
  Filter,
  Sort,
  Projection,
  Update,
  QueryError,
  Double,
  compare,
  valuesEqual,
  parseLossless,
  stringifyLossless,
  type QuerySpec,
  type QueryErrorCode,
  type Value,
  type Doc,
} from "./query/index.js";
