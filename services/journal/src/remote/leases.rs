//! Leadership through the journal service: its arbiter grants, renews and releases the lease,
//! and fences the writes this store sends (see [`crate::leadership`]).

use async_trait::async_trait;
use babysitter_proto::journal::v1 as pb;

use super::RemoteStore;
use crate::error::Result;
use crate::leadership::{Acquired, Candidate, LeaseKeeper, Term};

#[async_trait]
impl LeaseKeeper for RemoteStore {
    async fn acquire(&self, c: &Candidate) -> Result<Acquired> {
        c.validate()?;
        let r = self
            .client()
            .acquire_leadership(pb::AcquireLeadershipRequest {
                group: c.group.clone(),
                holder: c.holder.clone(),
                address: c.address.clone(),
                ttl_ms: c.ttl.as_millis() as u64,
            })
            .await
            .map_err(|s| self.error("", "AcquireLeadership", s))?
            .into_inner();
        let current = r.current.unwrap_or_default();
        let term = Term {
            group: current.group,
            holder: current.holder,
            address: current.address,
            epoch: current.epoch,
            ttl: std::time::Duration::from_millis(current.ttl_ms),
        };
        Ok(if r.granted {
            Acquired::Granted(term)
        } else {
            Acquired::Held(term)
        })
    }

    async fn renew(&self, term: &Term) -> Result<()> {
        let fence = pb::WriterFence {
            group: term.group.clone(),
            epoch: term.epoch,
        };
        self.client()
            .renew_leadership(pb::RenewLeadershipRequest {
                group: term.group.clone(),
                holder: term.holder.clone(),
                epoch: term.epoch,
            })
            .await
            .map_err(|s| self.write_error("", "RenewLeadership", Some(&fence), s))?;
        Ok(())
    }

    async fn release(&self, term: &Term) -> Result<()> {
        self.client()
            .release_leadership(pb::ReleaseLeadershipRequest {
                group: term.group.clone(),
                holder: term.holder.clone(),
                epoch: term.epoch,
            })
            .await
            .map_err(|s| self.error("", "ReleaseLeadership", s))?;
        Ok(())
    }
}
