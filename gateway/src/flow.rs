//! The order in which waiting requests are served: by priority class, and
//! between the tenants of one class in turns (the tenant served longest ago
//! goes next), so that a tenant sending more requests gets no more turns
//! than one sending few. Within a tenant, oldest first.
//!
//! With tenants' usage known ([`UsageBands`]: their recent usage across
//! every gateway replica, [`crate::tenants::fleet_usage`]), the turn goes
//! to the waiting tenant in the lowest band of usage, and tenants of one
//! band take turns: a tenant that used much of the fleet lately, on any
//! replica, waits behind one that used little.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use crate::tenants::Priority;

/// A request's class in the queue, highest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// A tenant's `high` priority.
    High = 0,
    /// The default.
    Normal = 1,
    /// A tenant's `low` priority.
    Low = 2,
    /// Requests marked `X-FlexInfer-Internal-Workload-Class: background`.
    Background = 3,
}

const CLASSES: usize = 4;

impl Class {
    /// The class of a tenant's priority.
    pub fn of(priority: Priority) -> Self {
        match priority {
            Priority::High => Class::High,
            Priority::Normal => Class::Normal,
            Priority::Low => Class::Low,
        }
    }

    /// The class name.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::High => "high",
            Class::Normal => "normal",
            Class::Low => "low",
            Class::Background => "background",
        }
    }
}

/// Who waits: its class and tenant (the empty name for requests without one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    /// Priority class.
    pub class: Class,
    /// Tenant name.
    pub tenant: Arc<str>,
}

/// Each tenant's band of recent usage (0: none or little); lower bands are
/// served first.
#[derive(Clone)]
pub struct UsageBands(pub Arc<dyn Fn(&str) -> u64 + Send + Sync>);

impl fmt::Debug for UsageBands {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("UsageBands")
    }
}

/// A tenant's place in its class's turns: (last served, oldest ticket, tenant).
type Turn = (u64, u64, Arc<str>);

/// One tenant's waiters in one class.
#[derive(Debug)]
struct TenantQueue<T> {
    items: VecDeque<(u64, T)>,
    /// When it was last served (the class's turn counter).
    last_served: u64,
}

#[derive(Debug)]
struct ClassQueue<T> {
    tenants: HashMap<Arc<str>, TenantQueue<T>>,
    /// Tenants with waiters, by (last served, oldest ticket): the first is
    /// the one whose turn it is.
    turns: BTreeSet<Turn>,
    /// Turns given so far.
    served: u64,
}

impl<T> Default for ClassQueue<T> {
    fn default() -> Self {
        Self {
            tenants: HashMap::new(),
            turns: BTreeSet::new(),
            served: 0,
        }
    }
}

impl<T> ClassQueue<T> {
    fn push(&mut self, tenant: &Arc<str>, ticket: u64, item: T) {
        let queue = self
            .tenants
            .entry(tenant.clone())
            .or_insert_with(|| TenantQueue {
                items: VecDeque::new(),
                last_served: 0,
            });
        if queue.items.is_empty() {
            self.turns
                .insert((queue.last_served, ticket, tenant.clone()));
        }
        queue.items.push_back((ticket, item));
    }

    fn pop(&mut self, bands: Option<&UsageBands>) -> Option<(u64, T)> {
        let (_, _, tenant) = match bands {
            Some(bands) if self.turns.len() > 1 => {
                // The lowest band; within it, whose turn it is.
                let mut lowest: Option<(u64, &Turn)> = None;
                for turn in &self.turns {
                    let band = (bands.0)(&turn.2);
                    if lowest.is_none_or(|(b, _)| band < b) {
                        lowest = Some((band, turn));
                    }
                    if band == 0 {
                        break;
                    }
                }
                let turn = lowest?.1.clone();
                self.turns.take(&turn)?
            }
            _ => self.turns.pop_first()?,
        };
        let queue = self.tenants.get_mut(&tenant)?;
        let item = queue.items.pop_front()?;
        self.served += 1;
        queue.last_served = self.served;
        if let Some((next, _)) = queue.items.front() {
            self.turns.insert((queue.last_served, *next, tenant));
        }
        Some(item)
    }

    fn remove(&mut self, ticket: u64) -> Option<T> {
        let (tenant, queue) = self
            .tenants
            .iter_mut()
            .find(|(_, q)| q.items.iter().any(|(t, _)| *t == ticket))?;
        let tenant = tenant.clone();
        let front = queue.items.front().map(|(t, _)| *t);
        let at = queue.items.iter().position(|(t, _)| *t == ticket)?;
        let (_, item) = queue.items.remove(at)?;
        if front == Some(ticket) {
            self.turns
                .remove(&(queue.last_served, ticket, tenant.clone()));
            if let Some((next, _)) = queue.items.front() {
                self.turns.insert((queue.last_served, *next, tenant));
            }
        }
        Some(item)
    }

    /// The youngest waiter's ticket.
    fn youngest(&self) -> Option<u64> {
        self.tenants
            .values()
            .filter_map(|q| q.items.back().map(|(t, _)| *t))
            .max()
    }
}

/// Waiting items, each with a ticket, served by class; within a class the
/// tenant served longest ago goes next (each tenant's oldest item first),
/// so tenants with waiters take turns whatever their numbers.
#[derive(Debug)]
pub struct FairQueue<T> {
    classes: [ClassQueue<T>; CLASSES],
    len: usize,
    bands: Option<UsageBands>,
}

impl<T> Default for FairQueue<T> {
    fn default() -> Self {
        Self {
            classes: Default::default(),
            len: 0,
            bands: None,
        }
    }
}

impl<T> FairQueue<T> {
    /// A queue whose turns go by tenants' usage `bands`, when given.
    pub fn with_bands(bands: Option<UsageBands>) -> Self {
        Self {
            bands,
            ..Self::default()
        }
    }

    /// Items waiting.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `item` under `ticket` (increasing with arrival) for `who`.
    pub fn push(&mut self, who: &Waiter, ticket: u64, item: T) {
        self.classes[who.class as usize].push(&who.tenant, ticket, item);
        self.len += 1;
    }

    /// The next item to serve: the highest class with a waiter; in it, the
    /// oldest item of the tenant served longest ago.
    pub fn pop(&mut self) -> Option<(u64, T)> {
        let bands = self.bands.as_ref();
        let item = self.classes.iter_mut().find_map(|c| c.pop(bands))?;
        self.len -= 1;
        Some(item)
    }

    /// Removes and returns the item of `ticket`, if it waits.
    pub fn remove(&mut self, ticket: u64) -> Option<T> {
        let item = self.classes.iter_mut().find_map(|c| c.remove(ticket))?;
        self.len -= 1;
        Some(item)
    }

    /// Takes out the youngest item of the lowest class below `class`, to
    /// make room for a request that ranks higher; `None` when every
    /// waiter ranks at least as high.
    pub fn evict_below(&mut self, class: Class) -> Option<(u64, T)> {
        let lower = (class as usize + 1..CLASSES).rev();
        let ticket = lower.into_iter().find_map(|c| self.classes[c].youngest())?;
        self.remove(ticket).map(|item| (ticket, item))
    }

    /// Waiters by class and tenant, for reports.
    pub fn depths(&self) -> Vec<(Class, Arc<str>, usize)> {
        let classes = [Class::High, Class::Normal, Class::Low, Class::Background];
        let mut out = Vec::new();
        for (class, queue) in classes.iter().zip(&self.classes) {
            for (tenant, q) in &queue.tenants {
                if !q.items.is_empty() {
                    out.push((*class, tenant.clone(), q.items.len()));
                }
            }
        }
        out.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(class: Class, tenant: &str) -> Waiter {
        Waiter {
            class,
            tenant: Arc::from(tenant),
        }
    }

    #[test]
    fn higher_classes_first_and_tenants_take_turns() {
        let mut q = FairQueue::default();
        let mut ticket = 0;
        let mut push = |q: &mut FairQueue<&str>, w: &Waiter, name| {
            ticket += 1;
            q.push(w, ticket, name);
        };
        let (a, b) = (who(Class::Normal, "a"), who(Class::Normal, "b"));
        for name in ["a1", "a2", "a3", "a4"] {
            push(&mut q, &a, name);
        }
        push(&mut q, &b, "b1");
        push(&mut q, &who(Class::Background, "bench"), "bg");
        push(&mut q, &b, "b2");
        push(&mut q, &who(Class::High, "c"), "c1");
        let order: Vec<_> = std::iter::from_fn(|| q.pop().map(|(_, n)| n)).collect();
        assert_eq!(order, ["c1", "a1", "b1", "a2", "b2", "a3", "a4", "bg"]);
        assert!(q.is_empty());
    }

    #[test]
    fn removal_and_eviction_keep_the_turns_right() {
        let mut q = FairQueue::default();
        q.push(&who(Class::Low, "a"), 1, "a1");
        q.push(&who(Class::Low, "b"), 2, "b1");
        q.push(&who(Class::Background, "x"), 3, "x1");
        q.push(&who(Class::Low, "a"), 4, "a2");
        assert_eq!(q.remove(2), Some("b1"));
        assert_eq!(q.remove(2), None);
        assert_eq!(
            q.evict_below(Class::Normal),
            Some((3, "x1")),
            "the lowest class goes first"
        );
        assert_eq!(
            q.evict_below(Class::Normal),
            Some((4, "a2")),
            "then the youngest"
        );
        assert_eq!(
            q.evict_below(Class::Low),
            None,
            "nothing ranks below low now"
        );
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop(), Some((1, "a1")));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn tenants_that_used_less_of_the_fleet_go_first_and_one_band_takes_turns() {
        let used: HashMap<&str, u64> = [("heavy", 3), ("light", 0), ("light2", 0)].into();
        let bands = UsageBands(Arc::new(move |t: &str| used.get(t).copied().unwrap_or(0)));
        let mut q = FairQueue::with_bands(Some(bands));
        let mut ticket = 0;
        for tenant in ["heavy", "heavy", "light", "heavy", "light2", "light"] {
            ticket += 1;
            q.push(&who(Class::Normal, tenant), ticket, tenant);
        }
        // A higher class still goes first, whatever its usage.
        q.push(&who(Class::High, "heavy"), 99, "heavy-high");
        let order: Vec<_> = std::iter::from_fn(|| q.pop().map(|(_, n)| n)).collect();
        assert_eq!(
            order,
            [
                "heavy-high",
                "light",
                "light2",
                "light",
                "heavy",
                "heavy",
                "heavy"
            ]
        );
    }

    #[test]
    fn ten_thousand_waiters_are_served_in_turns() {
        let mut q = FairQueue::default();
        for i in 0..10_000u64 {
            let tenant = if i % 10 == 0 { "few" } else { "many" };
            q.push(&who(Class::Normal, tenant), i, tenant);
        }
        let first: Vec<_> = (0..200).filter_map(|_| q.pop().map(|(_, t)| t)).collect();
        let few = first.iter().filter(|t| **t == "few").count();
        assert_eq!(few, 100, "one turn each while both wait");
    }
}
