//! Node history for the charts: read from Proxmox's `rrddata` through each
//! backend, cached at its own pace, and drawn as SVG in the HTML the
//! server sends.

mod common;

fn count(commands: &[String], needle: &str) -> usize {
    commands.iter().filter(|c| c.contains(needle)).count()
}

#[tokio::test]
async fn the_node_page_is_svg_from_rrddata_read_once_per_step() {
    let s = common::server(&[]).await;
    let (status, html) = common::get(&format!("{}/node/pve1?tf=day", s.url)).await;
    assert_eq!(status, 200);
    assert!(html.contains(r#"data-timeframe="day""#), "{html}");
    assert!(html.contains(r#"data-points="70""#));
    assert_eq!(html.matches("<figure").count(), 4, "CPU, RAM, network, IO");
    assert!(html.contains(r#"<path d="M0 "#) && html.contains(r#"class="chart-line line-a""#));
    assert!(
        html.contains("<strong>CPU usage</strong>: <!>now "),
        "the figures in words"
    );

    // Read again within the step: from memory.
    let (_, again) = common::get(&format!("{}/node/pve1?tf=day", s.url)).await;
    assert!(again.contains(r#"data-points="70""#));
    let commands = common::commands(&s).await;
    assert_eq!(
        count(&commands, "pvesh get /nodes/pve1/rrddata --timeframe day"),
        1,
        "{commands:#?}"
    );

    // The overview's cards carry the hour of every online node.
    let (_, overview) = common::get(&format!("{}/", s.url)).await;
    assert_eq!(
        overview.matches(r#"class="spark""#).count(),
        6,
        "two per node"
    );
    assert!(overview.contains(r#"aria-label="CPU, last hour: now "#));
    let commands = common::commands(&s).await;
    for node in ["pve1", "pve2", "pve3"] {
        assert_eq!(
            count(
                &commands,
                &format!("/nodes/{node}/rrddata --timeframe hour")
            ),
            1,
            "{node}: {commands:#?}"
        );
    }
}

#[tokio::test]
async fn an_unknown_node_or_timeframe_reads_nothing() {
    let s = common::server(&[]).await;
    let (_, html) = common::get(&format!("{}/node/pve9", s.url)).await;
    assert!(
        html.contains("node &#x27;pve9&#x27; not found") || html.contains("node 'pve9' not found"),
        "{html}"
    );
    // An unknown timeframe is the default one.
    let (_, html) = common::get(&format!("{}/node/pve2?tf=year", s.url)).await;
    assert!(html.contains(r#"data-timeframe="hour""#));
    let commands = common::commands(&s).await;
    assert_eq!(count(&commands, "pve9"), 0, "{commands:#?}");
}

#[tokio::test]
async fn an_offline_node_has_no_sparklines_and_its_page_says_why() {
    let s = common::server(&[]).await;
    common::node_state(&s, "pve3", "offline").await;
    let (_, overview) = common::get(&format!("{}/", s.url)).await;
    assert_eq!(
        overview.matches(r#"class="spark""#).count(),
        4,
        "pve1 and pve2 only"
    );
    let (_, html) = common::get(&format!("{}/node/pve3", s.url)).await;
    assert!(
        html.contains("Cannot read the node&#x27;s history")
            || html.contains("Cannot read the node's history"),
        "{html}"
    );
}
