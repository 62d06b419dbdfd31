//! The node arbiter's logic: the device inventory, admission (what fits where, and why not),
//! placement (bin-pack / spread) and, in the daemon, the control socket and persisted slice
//! records ([`server`], [`store`], [`nvml`]), the time-slice scheduler ([`sched`],
//! `docs/scheduling.md`), reclaim, the backstop, metrics, and the orderly stop ([`shutdown`]).

pub mod admission;
pub mod backstop;
pub mod fit;
pub mod inventory;
pub mod metrics;
pub mod nvml;
pub mod owner;
pub mod placement;
pub mod privileges;
pub mod reclaim;
pub mod sched;
pub mod server;
pub mod shutdown;
pub mod slices;
pub mod state;
pub mod store;
pub mod syscalls;

pub use admission::{Admission, AdmitError, Admitted, Change, Holdings, Updated};
pub use fit::{Constraint, DeviceRefusal, Load, Policy, Refusal};
pub use inventory::{DeviceInfo, DeviceInventory, InventoryError, StaticInventory};
pub use state::State;
