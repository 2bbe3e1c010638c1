//! One live run per session, on one node (`registry`) or across nodes sharing PostgreSQL
//! (`pg_leases`).

pub mod pg_leases;
pub mod registry;
