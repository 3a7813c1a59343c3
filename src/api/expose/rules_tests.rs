use super::*;
use crate::api::expose::{ExposeTarget, TrafficPolicy};

fn lb(target: ExposeTarget, ranges: &[&str]) -> ExposeSpec {
    ExposeSpec {
        target,
        type_: ExposeType::LoadBalancer,
        allowed_source_ranges: ranges.iter().map(|r| (*r).to_owned()).collect(),
        annotations: BTreeMap::new(),
        hostname: None,
        load_balancer_class: None,
        external_traffic_policy: None,
        node_port: None,
    }
}

fn node_port(target: ExposeTarget, port: Option<i32>) -> ExposeSpec {
    ExposeSpec {
        type_: ExposeType::NodePort,
        node_port: port,
        ..lb(target, &[])
    }
}

/// `(path, message)` of each error.
fn found(errors: &[FieldError]) -> Vec<(String, String)> {
    errors
        .iter()
        .map(|e| (e.path.clone(), e.message.clone()))
        .collect()
}

fn paths(expose: &[ExposeSpec]) -> Vec<String> {
    errors("orders", expose)
        .into_iter()
        .map(|e| e.path)
        .collect()
}

#[test]
fn well_formed_entries_pass() {
    let mut public = lb(
        ExposeTarget::Rw,
        &["203.0.113.0/24", "2001:db8::/32", "0.0.0.0/0"],
    );
    public.hostname = Some("orders.db.example.com".into());
    public.load_balancer_class = Some("example.com/internal".into());
    public.external_traffic_policy = Some(TrafficPolicy::Local);
    public.annotations.insert(
        "service.beta.kubernetes.io/aws-load-balancer-scheme".into(),
        "internal".into(),
    );
    let expose = [
        public,
        node_port(ExposeTarget::Rw, Some(30_432)),
        node_port(ExposeTarget::Ro, None),
    ];
    assert_eq!(found(&errors("orders", &expose)), []);
    assert_eq!(
        found(&node_port_errors(&expose, NodePortRange::default())),
        []
    );
}

#[test]
fn a_load_balancer_needs_source_ranges() {
    assert_eq!(
        found(&errors("orders", &[lb(ExposeTarget::Rw, &[])])),
        [(
            "spec.expose[0].allowedSourceRanges".to_owned(),
            LOAD_BALANCER_NEEDS_RANGES.to_owned()
        )]
    );
}

#[test]
fn fields_of_the_other_type_are_refused() {
    let mut with_port = lb(ExposeTarget::Rw, &["192.0.2.0/24"]);
    with_port.node_port = Some(30_000);
    let mut with_ranges = node_port(ExposeTarget::Ro, None);
    with_ranges.allowed_source_ranges = vec!["192.0.2.0/24".into()];
    with_ranges.load_balancer_class = Some("example.com/vip".into());
    assert_eq!(
        paths(&[with_port, with_ranges]),
        [
            "spec.expose[0].nodePort",
            "spec.expose[1].allowedSourceRanges",
            "spec.expose[1].loadBalancerClass",
        ]
    );
}

#[test]
fn source_ranges_must_be_cidrs_of_networks() {
    let expose = [lb(
        ExposeTarget::Rw,
        &[
            "192.0.2.0/24",
            "192.0.2.0",
            "192.0.2.0/33",
            "example.com/24",
            "192.0.2.7/24",
            "2001:db8::1/32",
            "2001:db8::/129",
            "192.0.2.0/24",
        ],
    )];
    let errors = found(&errors("orders", &expose));
    let by_index: Vec<(&str, &str)> = errors
        .iter()
        .map(|(p, m)| (p.as_str(), m.as_str()))
        .collect();
    let expect = [
        ("spec.expose[0].allowedSourceRanges[1]", "no /prefix"),
        ("spec.expose[0].allowedSourceRanges[2]", "from 0 to 32"),
        (
            "spec.expose[0].allowedSourceRanges[3]",
            "neither IPv4 nor IPv6",
        ),
        (
            "spec.expose[0].allowedSourceRanges[4]",
            "write 192.0.2.0/24 for the network, or 192.0.2.7/32",
        ),
        (
            "spec.expose[0].allowedSourceRanges[5]",
            "write 2001:db8::/32",
        ),
        ("spec.expose[0].allowedSourceRanges[6]", "from 0 to 128"),
        (
            "spec.expose[0].allowedSourceRanges[7]",
            "repeats allowedSourceRanges[0]",
        ),
    ];
    assert_eq!(by_index.len(), expect.len(), "{errors:?}");
    for ((path, message), (want_path, want)) in by_index.iter().zip(expect) {
        assert_eq!(*path, want_path);
        assert!(message.contains(want), "{path}: {message:?} lacks {want:?}");
    }
}

#[test]
fn hostnames_are_dns_subdomains() {
    let long_label = "a".repeat(64);
    let long_name = ["abcdefghij"; 24].join(".");
    let bad = [
        "Orders.example.com",
        "*.example.com",
        "orders..example.com",
        "-orders.example.com",
        "orders_db.example.com",
        long_label.as_str(),
        long_name.as_str(),
        "",
    ];
    for hostname in bad {
        let mut entry = lb(ExposeTarget::Rw, &["192.0.2.0/24"]);
        entry.hostname = Some(hostname.into());
        let errors = found(&errors("orders", &[entry]));
        assert_eq!(errors.len(), 1, "{hostname:?}: {errors:?}");
        assert_eq!(errors[0].0, "spec.expose[0].hostname", "{hostname:?}");
        assert!(
            errors[0].1.contains("is not a DNS name"),
            "{hostname:?}: {}",
            errors[0].1
        );
    }
    let mut fine = lb(ExposeTarget::Rw, &["192.0.2.0/24"]);
    fine.hostname = Some(format!("{}.example.com", "a".repeat(63)));
    assert_eq!(found(&errors("orders", &[fine])), []);
}

#[test]
fn annotation_keys_are_qualified_names_and_the_hostname_is_tusks() {
    let mut entry = lb(ExposeTarget::Rw, &["192.0.2.0/24"]);
    entry.annotations.insert("bad key".into(), String::new());
    entry
        .annotations
        .insert("Example.com/x".into(), String::new());
    entry
        .annotations
        .insert("example.com/".into(), String::new());
    entry
        .annotations
        .insert("fine.example.com/ok_1".into(), String::new());
    let errors = found(&errors("orders", std::slice::from_ref(&entry)));
    let keys: Vec<&str> = errors.iter().map(|(_, m)| m.as_str()).collect();
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(
        errors
            .iter()
            .all(|(p, _)| p == "spec.expose[0].annotations")
    );
    assert!(
        keys.iter()
            .any(|m| m.starts_with("\"bad key\" is not a valid annotation key"))
    );
    assert!(
        keys.iter()
            .any(|m| m.contains("the prefix \"Example.com\""))
    );
    assert!(keys.iter().any(|m| m.starts_with("\"example.com/\"")));

    let mut dns = lb(ExposeTarget::Rw, &["192.0.2.0/24"]);
    dns.annotations
        .insert(EXTERNAL_DNS_HOSTNAME.into(), "a.example.com".into());
    assert_eq!(
        found(&super::errors("orders", std::slice::from_ref(&dns))),
        [],
        "without hostname the user's own ExternalDNS annotation is theirs"
    );
    dns.hostname = Some("orders.example.com".into());
    assert_eq!(
        found(&super::errors("orders", &[dns])),
        [(
            "spec.expose[0].annotations".to_owned(),
            format!(
                "{EXTERNAL_DNS_HOSTNAME} is set from spec.expose[0].hostname: remove the annotation or the hostname"
            )
        )]
    );
}

#[test]
fn a_load_balancer_class_is_a_qualified_name() {
    let mut entry = lb(ExposeTarget::Rw, &["192.0.2.0/24"]);
    entry.load_balancer_class = Some("not a class".into());
    assert_eq!(paths(&[entry]), ["spec.expose[0].loadBalancerClass"]);
}

#[test]
fn one_entry_per_target_and_type_and_one_per_node_port() {
    let expose = [
        lb(ExposeTarget::Rw, &["192.0.2.0/24"]),
        node_port(ExposeTarget::Rw, Some(30_100)),
        lb(ExposeTarget::Ro, &["192.0.2.0/24"]),
        lb(ExposeTarget::Rw, &["198.51.100.0/24"]),
        node_port(ExposeTarget::R, Some(30_100)),
    ];
    let errors = found(&errors("orders", &expose));
    assert_eq!(
        errors,
        [
            (
                "spec.expose[3]".to_owned(),
                format!(
                    "publishes rw as LoadBalancer like spec.expose[0]: {ONE_PER_TARGET_AND_TYPE}"
                )
            ),
            (
                "spec.expose[4].nodePort".to_owned(),
                "30100 is already spec.expose[1].nodePort: a node port serves one Service"
                    .to_owned()
            ),
        ]
    );
}

#[test]
fn node_ports_stay_in_the_cluster_s_range() {
    let expose = [
        node_port(ExposeTarget::Rw, Some(30_000)),
        node_port(ExposeTarget::Ro, Some(32_768)),
        node_port(ExposeTarget::R, Some(80)),
    ];
    assert_eq!(
        found(&node_port_errors(&expose, NodePortRange::default())),
        [
            (
                "spec.expose[1].nodePort".to_owned(),
                "32768 is outside the cluster's node-port range 30000-32767".to_owned()
            ),
            (
                "spec.expose[2].nodePort".to_owned(),
                "80 is outside the cluster's node-port range 30000-32767".to_owned()
            ),
        ]
    );
    let wide: NodePortRange = "1-40000".parse().expect("a range");
    assert_eq!(found(&node_port_errors(&expose, wide)), []);
}

#[test]
fn node_port_ranges_parse_like_kube_apiserver_s_flag() {
    assert_eq!(
        "30000-32767".parse::<NodePortRange>().ok(),
        Some(NodePortRange::default())
    );
    assert_eq!(
        " 20000 - 20010 ".parse::<NodePortRange>().ok(),
        Some(NodePortRange {
            first: 20_000,
            last: 20_010
        })
    );
    for bad in ["", "30000", "32767-30000", "0-10", "1-65536", "a-b"] {
        assert!(bad.parse::<NodePortRange>().is_err(), "{bad:?}");
    }
}

#[test]
fn the_longest_service_name_must_fit_63_characters() {
    let name = "a".repeat(52);
    assert_eq!(
        found(&errors(&name, &[node_port(ExposeTarget::R, None)])),
        [],
        "<db>-r-nodeport has 63 characters"
    );
    let errors = found(&errors(
        &name,
        &[
            node_port(ExposeTarget::R, None),
            node_port(ExposeTarget::Ro, None),
        ],
    ));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, "metadata.name");
    assert!(
        errors[0].1.contains(&format!(
            "Service {name}-ro-nodeport would have 64 characters"
        )),
        "{}",
        errors[0].1
    );
    assert_eq!(
        found(&super::errors(&name, &[])),
        [],
        "only a Database that publishes something has these Services"
    );
}

#[test]
fn an_open_load_balancer_warns_naming_the_field() {
    let expose = [
        lb(ExposeTarget::Rw, &["192.0.2.0/24", "0.0.0.0/0"]),
        lb(ExposeTarget::Ro, &["::/0"]),
        node_port(ExposeTarget::R, None),
    ];
    let warnings = warnings("orders", &expose);
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].starts_with("spec.expose[0].allowedSourceRanges[1] is 0.0.0.0/0: Service orders-rw-lb accepts connections from any address"),
        "{}",
        warnings[0]
    );
    assert!(
        warnings[1]
            .starts_with("spec.expose[1].allowedSourceRanges[0] is ::/0: Service orders-ro-lb"),
        "{}",
        warnings[1]
    );
    assert_eq!(
        super::warnings("orders", &[lb(ExposeTarget::Rw, &["192.0.2.0/24"])]),
        Vec::<String>::new()
    );
}
