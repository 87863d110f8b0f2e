//! An in-memory Kubernetes API server for tests.
//!
//! Controllers, reflectors and patch code are tested through the same
//! `kube::Client` code paths they use in production: [`TestApiServer`]
//! serves real HTTP on an ephemeral loopback port, answers the paths kube
//! sends, and keeps objects in memory. Start several in one test to
//! simulate several clusters.
//!
//! ```no_run
//! # async fn demo() {
//! use flexinfer_testkube::{TestApiServer, Verb};
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::api::{Api, PostParams};
//!
//! let server = TestApiServer::start().await;
//! let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
//! let mut cm = ConfigMap::default();
//! cm.metadata.name = Some("settings".into());
//! cms.create(&PostParams::default(), &cm).await.unwrap();
//! assert_eq!(server.writes(Verb::Create, "configmaps"), 1);
//! # }
//! ```
//!
//! # What it implements
//!
//! - Types: core `Namespace`, `Node`, `Pod`, `Service`, `ConfigMap`,
//!   `Secret`, `Event`, `PersistentVolumeClaim`, `PersistentVolume`,
//!   `ServiceAccount`; `apps/v1` `Deployment`, `ReplicaSet`, `StatefulSet`,
//!   `DaemonSet`; `batch/v1` `Job`; `discovery.k8s.io/v1` `EndpointSlice`;
//!   `coordination.k8s.io/v1` `Lease`; `events.k8s.io/v1` `Event`;
//!   `apiextensions.k8s.io/v1` `CustomResourceDefinition` (read: the
//!   registered CRDs); every FlexInfer CRD, scope and `/status` as declared.
//!   More via [`TestApiServerBuilder::resource`].
//! - Discovery: `/version`, `/api`, `/apis`, group and group/version
//!   documents, and aggregated discovery.
//! - Verbs: get, list (with `limit`/`continue`), watch, create, update,
//!   patch, delete, deletecollection; `dryRun=All`.
//! - Selectors: label (equality and set-based) and field selectors (any
//!   dotted path, `=`, `==`, `!=`) on lists, watches and deletecollection.
//! - Metadata: `uid`, `creationTimestamp`, `generateName`, a global
//!   monotonic `resourceVersion` (objects and lists), `generation` bumped
//!   when anything but `metadata` and `status` changes, 409 Conflict on a
//!   stale `resourceVersion` (update, patch, apply) and on creating an
//!   existing name, 404 with the upstream `Status` shape, 404 for objects
//!   in a missing namespace, 403 in a terminating one.
//! - Watches: ADDED/MODIFIED/DELETED in order, BOOKMARKs, 410 Gone
//!   (`Expired`) when the bounded history no longer reaches the requested
//!   resourceVersion, `sendInitialEvents` (streaming lists),
//!   `timeoutSeconds`.
//! - Patches: JSON merge, strategic merge (lists of containers, volumes,
//!   env, ports, conditions, owner references merged by key, finalizers as
//!   a set; `$patch`, `$retainKeys`, `$deleteFromPrimitiveList`), JSON
//!   patch, server-side apply with field managers, `managedFields`
//!   (`fieldsV1` computed from the objects), conflicts and `force`.
//!   Re-applying the same configuration writes nothing.
//! - `/status`: writes to it change only `status`; writes to the main
//!   resource leave `status` alone (types with a status subresource).
//! - Deletion: finalizers and `deletionTimestamp`; removing the last
//!   finalizer deletes; owner references with background garbage
//!   collection; `propagationPolicy` Orphan and Foreground (the owner
//!   waits for `blockOwnerDeletion` dependents), Jobs orphaning by
//!   default; a delete that removes the object answers with a `Status`,
//!   or with the object for the types whose upstream registry does;
//!   namespace deletion removes its contents; delete preconditions.
//! - Custom resources: pruning of unknown fields, schema defaults, and
//!   `type`/`required`/`enum` validation against the CRD schema.
//! - Test controls: request counters per verb and resource, fault
//!   injection, fixtures inserted directly, forced watch-history expiry.
//! - Simulated cluster (opt-in, see [`sim`]): Deployments run Pods that
//!   turn ready after a delay; a kubelet runs selected Pods as local
//!   processes on their own loopback addresses, ready when their readiness
//!   probe answers; Services get EndpointSlices of their ready Pods, which
//!   may point at local processes.
//!
//! # What it does not implement
//!
//! Authentication and authorization (everything is allowed), admission
//! webhooks, CEL validation rules, most built-in defaulting and validation,
//! version conversion (every served version of a type sees the same
//! objects), protobuf and table output, subresources other than `/status`
//! (`scale`, `log`, `exec`, `eviction`, `binding`, ...), graceful Pod
//! deletion (Pods go at once), pagination snapshots (`continue` pages
//! read the current state), `resourceVersionMatch` on lists (lists always
//! read the latest state), field-selector restrictions per kind (any path
//! is accepted), scheduling, kubelets, ReplicaSets, and rolling updates. It
//! is a test double, not an API server.

#![warn(missing_docs)]

mod apply;
mod defaults;
mod discovery;
mod error;
mod fields;
mod gc;
mod http;
mod meta;
mod names;
mod patch;
pub mod real;
mod registry;
mod requests;
mod schema;
mod selector;
mod server;
pub mod sim;
mod store;
mod typing;
mod watch;

pub use error::ApiError;
pub use registry::ResourceType;
pub use requests::Verb;
pub use server::{
    TestApiServer, TestApiServerBuilder, DEFAULT_BOOKMARK_INTERVAL, DEFAULT_NAMESPACES,
    DEFAULT_WATCH_HISTORY,
};
