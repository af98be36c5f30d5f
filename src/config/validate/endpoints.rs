//! `endpoints` on routes and provider groups: the API endpoints their
//! requests may use.

use super::Validator;
use crate::openai::{Endpoint, EndpointSet, ROUTABLE_ENDPOINTS};

impl Validator<'_> {
    /// The allow list of the route or group at `here` (`routes[2]`); every
    /// endpoint when it is left out.
    pub(super) fn endpoints(&mut self, here: &str, names: Option<Vec<String>>) -> EndpointSet {
        let Some(names) = names else {
            return EndpointSet::ALL;
        };
        if names.is_empty() {
            self.error(
                format!("{here}.endpoints"),
                "must name at least one endpoint (leave it out for every endpoint)",
            );
            return EndpointSet::ALL;
        }
        let mut set = EndpointSet::NONE;
        for (i, name) in names.iter().enumerate() {
            let field = format!("{here}.endpoints[{i}]");
            match Endpoint::routable(name) {
                Some(endpoint) if set.allows(endpoint) => {
                    self.error(field, format!("{name:?} is listed twice"));
                }
                Some(endpoint) => set = set.with(endpoint),
                None => {
                    let known: Vec<&str> = ROUTABLE_ENDPOINTS.iter().map(|e| e.as_str()).collect();
                    self.error(
                        field,
                        format!("unknown endpoint {name:?} (known: {})", known.join(", ")),
                    );
                }
            }
        }
        set
    }
}
