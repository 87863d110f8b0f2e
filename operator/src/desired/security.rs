//! Security settings of the pods the operator creates, chosen so that
//! namespaces enforcing the Pod Security `baseline` level admit every model
//! and cache pod, and `restricted` admits them once the Model runs as a
//! non-root user (`spec.securityContext.runAsNonRoot` with an image that
//! allows it): no privilege escalation, no capabilities, the runtime's
//! default seccomp profile.
//!
//! Pods that mount a hostPath (the Local cache strategy, the shared flash
//! loader's tmpfs, the ROCm compilation cache, the tmpfs cleanup Job) are
//! refused by `baseline` whatever they set; `docs/crds.md` says so.

use k8s_openapi::api::core::v1::{
    Capabilities, Container, PodSecurityContext, PodSpec, SeccompProfile, SecurityContext,
};

/// The security context of every container the operator creates.
pub fn container_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            add: None,
        }),
        ..Default::default()
    }
}

/// `base` (the operator's own pod settings, e.g. supplemental groups) with
/// the runtime's default seccomp profile, then every field the Model sets
/// in `spec.securityContext` on top.
pub fn pod_security_context(
    base: Option<PodSecurityContext>,
    model: Option<&PodSecurityContext>,
) -> PodSecurityContext {
    let mut out = base.unwrap_or_default();
    out.seccomp_profile = Some(SeccompProfile {
        type_: "RuntimeDefault".to_owned(),
        localhost_profile: None,
    });
    let Some(own) = model else {
        return out;
    };
    let (Ok(mut merged), Ok(own)) = (serde_json::to_value(&out), serde_json::to_value(own)) else {
        return out;
    };
    if let (Some(m), Some(o)) = (merged.as_object_mut(), own.as_object()) {
        for (k, v) in o {
            m.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(merged).unwrap_or(out)
}

/// Hardens `pod`: [`container_security_context`] on every container and
/// init container that sets none, and [`pod_security_context`].
pub fn harden(pod: &mut PodSpec, model: Option<&PodSecurityContext>) {
    let containers = pod
        .containers
        .iter_mut()
        .chain(pod.init_containers.iter_mut().flatten());
    for c in containers {
        harden_container(c);
    }
    pod.security_context = Some(pod_security_context(pod.security_context.take(), model));
}

fn harden_container(c: &mut Container) {
    if c.security_context.is_none() {
        c.security_context = Some(container_security_context());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_s_own_settings_win_and_the_defaults_stay() {
        let base = PodSecurityContext {
            supplemental_groups: Some(vec![109]),
            ..Default::default()
        };
        let own = PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(1000),
            ..Default::default()
        };
        let merged = pod_security_context(Some(base), Some(&own));
        assert_eq!(merged.supplemental_groups, Some(vec![109]));
        assert_eq!(
            (merged.run_as_non_root, merged.run_as_user),
            (Some(true), Some(1000))
        );
        assert_eq!(merged.seccomp_profile.unwrap().type_, "RuntimeDefault");
    }

    #[test]
    fn every_container_is_hardened() {
        let mut pod = PodSpec {
            containers: vec![Container::default()],
            init_containers: Some(vec![Container::default()]),
            ..Default::default()
        };
        harden(&mut pod, None);
        for c in pod
            .containers
            .iter()
            .chain(pod.init_containers.iter().flatten())
        {
            let sc = c.security_context.as_ref().unwrap();
            assert_eq!(sc.allow_privilege_escalation, Some(false));
            assert_eq!(
                sc.capabilities.as_ref().unwrap().drop,
                Some(vec!["ALL".to_owned()])
            );
        }
    }
}
