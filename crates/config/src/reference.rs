//! The configuration reference: one entry per variable, next to the code
//! that reads them. `docs/configuration.md` is rendered from it
//! (`cargo xtask docs`); a test fails when that file is stale, and another
//! when the parser reads a variable this table does not describe (or the
//! table describes one the parser never reads).

/// Where a setting belongs, in the order the reference shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    Server,
    Cluster,
    Provisioning,
    Limits,
    Images,
    Guests,
    Access,
    ApiBackend,
    Jobs,
    Simulator,
    Tuning,
}

impl Group {
    const ALL: [Group; 11] = [
        Group::Server,
        Group::Cluster,
        Group::Provisioning,
        Group::Limits,
        Group::Images,
        Group::Guests,
        Group::Access,
        Group::ApiBackend,
        Group::Jobs,
        Group::Simulator,
        Group::Tuning,
    ];

    fn title(self) -> &'static str {
        match self {
            Group::Server => "Server",
            Group::Cluster => "Cluster",
            Group::Provisioning => "Provisioning",
            Group::Limits => "Provisioning limits",
            Group::Images => "Images",
            Group::Guests => "Guests",
            Group::Access => "Access",
            Group::ApiBackend => "API backend",
            Group::Jobs => "Jobs",
            Group::Simulator => "Simulator",
            Group::Tuning => "Tuning",
        }
    }
}

/// One variable the server reads.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// As written in the environment; a family as `NODE_<name>`.
    pub name: &'static str,
    pub group: Group,
    pub default: &'static str,
    pub meaning: &'static str,
}

const fn s(
    name: &'static str,
    group: Group,
    default: &'static str,
    meaning: &'static str,
) -> Setting {
    Setting {
        name,
        group,
        default,
        meaning,
    }
}

use Group::*;

/// Every variable `Config::from_env` reads.
pub const SETTINGS: &[Setting] = &[
    s(
        "PORT",
        Server,
        "`8080`",
        "Listen port, 0–65535; 0 picks a free port (the `pvedeck listening on` line says which).",
    ),
    s(
        "BIND_ADDR",
        Server,
        "`0.0.0.0`",
        "Address to listen on, IPv4 or IPv6. A loopback address also silences the exposure \
         warning ([Security: the exposure warning](security.md#the-exposure-warning)).",
    ),
    s(
        "TLS_CERT_FILE",
        Server,
        "unset: plain HTTP",
        "PEM certificate chain: pvedeck serves HTTPS itself (rustls), with `TLS_KEY_FILE`; both \
         files are read again on `SIGHUP` ([Operations: HTTPS](operations.md#https)).",
    ),
    s(
        "TLS_KEY_FILE",
        Server,
        "unset",
        "PEM private key (PKCS#8, PKCS#1 or SEC1) of `TLS_CERT_FILE`; set both or neither.",
    ),
    s(
        "DATA_DIR",
        Server,
        "`./data`",
        "pvedeck's own data: the job database `pvedeck.db`, `known_hosts`, the default image \
         cache, and with `sim` the SSH key and the simulated cluster (`sim/`).",
    ),
    s(
        "DATABASE_URL",
        Server,
        "unset: SQLite in `DATA_DIR/pvedeck.db`",
        "`postgres://user:password@host:port/database`: everything pvedeck keeps (jobs, events, \
         templates, users, tokens, owners, audit) lives in PostgreSQL instead, shared by every \
         pvedeck process on the same URL ([Architecture: one store, two databases](architecture.md#one-store-two-databases)). \
         Unreachable at start-up: exit 2, the password masked.",
    ),
    s(
        "LEPTOS_SITE_ROOT",
        Server,
        "`target/site`",
        "Where the built browser bundle and static files are served from (the package sets \
         `/usr/share/pvedeck/site`).",
    ),
    s(
        "RUST_LOG",
        Server,
        "`info`",
        "`tracing` filter, e.g. `pvedeck=debug,info`; one that does not parse stops the server.",
    ),
    s(
        "HOME",
        Server,
        "from the environment",
        "Only for the default `SSH_KEY_DIR` with `cli` and `api` (`$HOME/.ssh`); with neither \
         set, the server does not start.",
    ),
    s(
        "PVE_BACKEND",
        Cluster,
        "`sim`",
        "`sim`: the built-in simulated cluster; `cli`: `qm`/`pvesh`/`pvesm` on the main node and \
         `ssh root@<node>` for the others; `api`: Proxmox's REST API with a token \
         ([Backends](backends.md)).",
    ),
    s(
        "CLUSTERS",
        Cluster,
        "unset: one cluster, named `default`",
        "`name1,name2`: the Proxmox clusters this pvedeck serves (names of letters and digits, \
         from a letter). The first is the default one: `/api/vm/:id/*` reaches its VMs, \
         `/api/clusters/:cluster/vm/:id/*` any cluster's ([Operations: several \
         clusters](operations.md#several-clusters)).",
    ),
    s(
        "CLUSTER_<name>_<VAR>",
        Cluster,
        "the shared `<VAR>`",
        "Cluster `<name>`'s own value of `<VAR>`, one of `PVE_BACKEND`, `PVE_API_URL`, \
         `PVE_API_TOKEN`, `PVE_API_FINGERPRINT`, `PVE_API_INSECURE`, `PVE_API_CA_FILE`, \
         `GATEWAY`, `MAIN_NODE`, `NODE_<node>`, `ASSIGN_STORAGE`, `ASSIGN_IP_START`, \
         `ASSIGN_IP_END`, `TEMPLATE_ID_START`, `TEMPLATE_ID_END`, `RESERVED`, `IMPORT_STORAGE`, \
         `IMAGE_FETCH`, `MANAGE`, `MAX_OVERCOMMIT`, `MAX_PVE_COMMANDS`, `VM_IP_FILTER`, \
         `SSH_PORT`, `SSH_KEY_DIR`, `SIM_NODES`, `SIM_VMS`, `SIM_NODE_MEMORY`; `<name>` as in \
         `CLUSTERS` or upper-cased. Any other `CLUSTER_` variable stops the start. The clusters \
         after the first keep their own data under `DATA_DIR/clusters/<name>`.",
    ),
    s(
        "GATEWAY",
        Cluster,
        "`192.168.0.1` with `sim`; required otherwise",
        "IPv4 address. A VM's address is its first three octets and the VMID, `/24`, with this \
         as gateway.",
    ),
    s(
        "MAIN_NODE",
        Cluster,
        "`pve1` with `sim`; required otherwise",
        "The node VMs are created on (and, with `api`, images fetched to); a node name (letters, \
         digits, inner `-`).",
    ),
    s(
        "NODE_<name>",
        Cluster,
        "with `sim` and none set: `pve1`–`pve3` at `<gateway prefix>.11`–`.13`",
        "IPv4 address of node `<name>`, for `ssh root@<node>`. Only names with a lower-case \
         letter count (`NODE_ENV` is not a node). The main node needs one with `sim` and `cli`; \
         `api` routes by name.",
    ),
    s(
        "ASSIGN_STORAGE",
        Cluster,
        "`local-zfs` with `sim`; required otherwise",
        "Storage for imported disks and the cloud-init drive (a Proxmox storage id). Checked at \
         each install: it takes images, is active and of type `dir`, `zfspool`, `lvmthin` or \
         `nfs` ([Provisioning: storage check](provisioning.md#storage-check)).",
    ),
    s(
        "ASSIGN_IP_START",
        Provisioning,
        "`100`",
        "First VMID (the address's last octet) installs are given; clamped into 100–254, and \
         swapped with `ASSIGN_IP_END` when reversed. An `id` asked for must be in the range too.",
    ),
    s(
        "ASSIGN_IP_END",
        Provisioning,
        "`254`",
        "Last VMID installs are given; as `ASSIGN_IP_START`.",
    ),
    s(
        "RESERVED",
        Provisioning,
        "empty",
        "`id:label,id:label`: addresses of hosts that are not VMs, never given out, listed with \
         node `-` and refused for every action. An id alone is labelled `reserved`; an id named \
         twice is refused.",
    ),
    s(
        "TEMPLATE_ID_START",
        Provisioning,
        "`9000`",
        "First VMID of golden templates, 100–999999999; swapped with `TEMPLATE_ID_END` when \
         reversed. The range must not overlap `ASSIGN_IP_START`–`ASSIGN_IP_END`.",
    ),
    s(
        "TEMPLATE_ID_END",
        Provisioning,
        "`9099`",
        "Last VMID of golden templates; as `TEMPLATE_ID_START`.",
    ),
    s(
        "INSTALL_METHOD",
        Provisioning,
        "`import`",
        "What `POST /api/vm/install` does without `method`: `import` (the cloud image pipeline) \
         or `clone` (from the golden template, [Provisioning: the clone path](provisioning.md#the-clone-path)).",
    ),
    s(
        "VM_ROOT_PASSWORD",
        Provisioning,
        "unset: no root password",
        "Root password the init script sets, sent only as a SHA-512 crypt hash. `random`: a \
         fresh one per VM, shown once in the install's summary; any other value: that password \
         for every VM.",
    ),
    s(
        "VM_IP_FILTER",
        Provisioning,
        "`auto`",
        "Whether the VMs pvedeck makes get the Proxmox firewall's IP filter, so that each sends \
         only from its own address ([Security: addresses cannot be taken](security.md#addresses-cannot-be-taken)): \
         `auto` where the datacenter firewall is enabled (read at each install), `on` always (it \
         does nothing until the datacenter firewall is enabled; a start-up warning says so), \
         `off` never.",
    ),
    s(
        "VM_BALLOON_MIN",
        Provisioning,
        "unset: no balloon",
        "MB, at least 1: the memory a VM keeps when ballooning \
         ([Provisioning: balloon rules](provisioning.md#balloon-rules)).",
    ),
    s(
        "MAX_OVERCOMMIT",
        Provisioning,
        "`1.0`",
        "A number from 0.1 to 10: an install with `\"node\":\"auto\"` goes only to a node where \
         the VMs' assigned memory, and their vCPUs, with the new VM's stay within this many times \
         the node's memory and logical CPUs ([Provisioning: placement](provisioning.md#placement)).",
    ),
    s(
        "INIT_SCRIPTS",
        Provisioning,
        "`real`",
        "`real` init scripts, or `test`: a harmless set that only prints (for tests over real \
         SSH).",
    ),
    s(
        "VM_MAX_CPU",
        Limits,
        "unset: 32",
        "Most vCPUs, 1–32. An install is clamped to it; `set/cpu` above it is refused.",
    ),
    s(
        "VM_MAX_RAM",
        Limits,
        "unset: no maximum",
        "Most RAM in MB, at least 512. An install is clamped to it; `set/memory` above it is \
         refused.",
    ),
    s(
        "VM_MAX_DISK",
        Limits,
        "unset: no maximum",
        "Most disk in GB, at least 16. An install is clamped to it; `set/disk` growing past it \
         is refused.",
    ),
    s(
        "IMAGE_CACHE_DIR",
        Images,
        "`DATA_DIR/images`",
        "Cloud image cache, created readable by pvedeck only (0700), with the checksum each \
         image was verified against beside it.",
    ),
    s(
        "IMAGE_BASE_<OS>",
        Images,
        "the official mirrors",
        "`IMAGE_BASE_DEBIAN`, `_UBUNTU`, `_ROCKYLINUX`: an `http://` or `https://` directory \
         holding that OS's image files (and checksum list) under their official names, for \
         air-gapped sites and tests ([Provisioning: os images](provisioning.md#os-images)).",
    ),
    s(
        "IMAGE_VERIFY_<OS>",
        Images,
        "`checksum`",
        "`IMAGE_VERIFY_DEBIAN`, `_UBUNTU`, `_ROCKYLINUX`: `checksum` (an install fails at \
         `verifying OS image` when the mirror publishes no checksum list or the list does not \
         name the image) or `none` (a published checksum is still checked; without one the image \
         is used unverified and the step says so). Not `none` together with \
         `IMAGE_KEYRING_<OS>` ([Provisioning: os images](provisioning.md#os-images)).",
    ),
    s(
        "IMAGE_KEYRING_<OS>",
        Images,
        "none: lists are not signature-checked",
        "`IMAGE_KEYRING_DEBIAN`, `_UBUNTU`, `_ROCKYLINUX`: a file of OpenPGP public keys \
         (ASCII-armored or binary, one or several) that must have signed that OS's checksum \
         list; a missing or wrong signature fails the install at `verifying OS image`. Read at \
         start: a file that cannot be read or holds no key stops the server. Where each \
         distribution publishes its key: [Security: images](security.md#images).",
    ),
    s(
        "IMAGE_DOWNLOAD_TIMEOUT_SECS",
        Images,
        "`1800`",
        "The longest a whole image download may take, 1–604800: pvedeck's own (the partial \
         file is removed) and, with `IMAGE_FETCH=download`, the wait for the node's (its task \
         is stopped). A mirror that trickles bytes never stalls; this ends it and frees the \
         image for the next install.",
    ),
    s(
        "IMAGE_MAX_BYTES",
        Images,
        "`17179869184` (16 GiB)",
        "The largest image downloaded; a download announcing or passing it fails its step and \
         leaves no file.",
    ),
    s(
        "SSH_PORT",
        Guests,
        "`22`",
        "Port VMs are reached on (readiness, the init script, the VMID probe), 1–65535.",
    ),
    s(
        "SSH_POLL_INTERVAL_MS",
        Guests,
        "`5000`; with `sim`, 5000 / `SIM_SPEED`",
        "Pause between readiness tries, 1–3600000 ms.",
    ),
    s(
        "SSH_POLL_ATTEMPTS",
        Guests,
        "`60`",
        "Most readiness tries, 1–100000.",
    ),
    s(
        "SSH_KEY_DIR",
        Guests,
        "`DATA_DIR/ssh` with `sim`; `$HOME/.ssh` otherwise",
        "Where pvedeck's own key pair is found (`id_ed25519`, `id_rsa`, `id_ecdsa`) or made \
         (`ssh-keygen -t ed25519`).",
    ),
    s(
        "ADMIN_PUBKEY_FILE",
        Guests,
        "unset",
        "A file of more public keys, one per line, put into every installed VM (go-pve-qemu's \
         admin key file).",
    ),
    s(
        "ALLOW_IPS",
        Access,
        "`0.0.0.0`: everyone",
        "Comma list of addresses and CIDR blocks (IPv4, IPv6) that may change anything; \
         `0.0.0.0` anywhere means everyone ([Security: ALLOW_IPS](security.md#allow_ips)).",
    ),
    s(
        "API_TOKENS",
        Access,
        "empty: no token needed",
        "Comma list of tokens of at least 16 printable characters, each an administrator. When \
         set, every request but the sign-in and health check needs `Authorization: Bearer \
         <token>` (or a personal token, or a UI session) ([Security: API tokens](security.md#api-tokens)).",
    ),
    s(
        "PUBLIC_URL",
        Access,
        "unset",
        "The address people use (`http://` or `https://`): its origin may make changes, its host \
         is one of this server's names, and `https` makes the session cookie `Secure`.",
    ),
    s(
        "ALLOWED_HOSTS",
        Access,
        "empty",
        "More host names this server answers to (comma or space list) \
         ([Security: DNS rebinding](security.md#dns-rebinding)).",
    ),
    s(
        "ALLOWED_ORIGINS",
        Access,
        "empty",
        "Origins (`scheme://host[:port]`) of other sites whose pages may make changes (comma or \
         space list) ([Security: cross site requests](security.md#cross-site-requests)).",
    ),
    s(
        "MANAGE",
        Access,
        "`pvedeck`",
        "Which VMs pvedeck acts on: `pvedeck` (those it made), `pvedeck+seed` (also \
         go-pve-qemu's), `all` (every QEMU VM) ([Security: which VMs pvedeck acts on](security.md#which-vms-pvedeck-acts-on)).",
    ),
    s(
        "SESSION_TTL",
        Access,
        "`43200` (12 h)",
        "How long a UI login lasts, 60–31536000 s.",
    ),
    s(
        "OIDC_ISSUER",
        Access,
        "none",
        "An OpenID Connect provider's issuer URL: people sign in there ([Security: signing \
         in](security.md#signing-in)). With `OIDC_CLIENT_ID`; the redirect URI to register is \
         `<PUBLIC_URL>/auth/callback`.",
    ),
    s(
        "OIDC_CLIENT_ID",
        Access,
        "required with `OIDC_ISSUER`",
        "pvedeck's client id at the provider.",
    ),
    s(
        "OIDC_CLIENT_SECRET",
        Access,
        "none (a public client)",
        "pvedeck's client secret at the provider, never echoed.",
    ),
    s(
        "OIDC_CLIENT_SECRET_FILE",
        Access,
        "none",
        "A file holding the client secret instead (a systemd credential, a mounted secret).",
    ),
    s(
        "OIDC_GROUPS_CLAIM",
        Access,
        "`groups`",
        "The ID token claim that lists a user's groups.",
    ),
    s(
        "OIDC_ADMIN_GROUPS",
        Access,
        "none",
        "Groups whose members are admins (comma or space list); the others are users.",
    ),
    s(
        "QUOTA_DEFAULT",
        Access,
        "`vms=5,cores=16,memory=32,disk=500`",
        "What each user may hold at once: VMs, vCPUs, memory and disk in GiB; any of the four, \
         a number or `unlimited`, the others as the default. Admins have no quota ([Security: \
         users, owners and quotas](security.md#users-owners-and-quotas)).",
    ),
    s(
        "QUOTA_GROUP_<name>",
        Access,
        "none",
        "The quota of the members of group `<name>`, as `QUOTA_DEFAULT` (which fills what it \
         leaves out); a user in several groups has the largest of each measure, a user's own \
         quota (`pvedeck user quota`) comes first.",
    ),
    s(
        "TRUSTED_PROXIES",
        Access,
        "empty: the TCP peer is the client",
        "Comma list of addresses and CIDR blocks of reverse proxies whose `X-Forwarded-For` names \
         the client — for `ALLOW_IPS`, the sign-in and token limits, the stream limits and the \
         audit log ([Security: behind a proxy](security.md#behind-a-reverse-proxy)).",
    ),
    s(
        "AUDIT_KEEP_DAYS",
        Access,
        "`365`",
        "Audit entries older than this many days go, 1–36500.",
    ),
    s(
        "PVE_API_URL",
        ApiBackend,
        "required with `api`",
        "`https://<node>:8006`; `/api2/json` is added unless given.",
    ),
    s(
        "PVE_API_TOKEN",
        ApiBackend,
        "required with `api`",
        "`user@realm!tokenid=secret`, never echoed ([Backends: the API token](backends.md#the-api-token)).",
    ),
    s(
        "PVE_API_FINGERPRINT",
        ApiBackend,
        "one of the three trust settings is required with `api`",
        "SHA-256 of pveproxy's certificate as `pvenode cert info` shows it (colons and case \
         optional). Exactly one of `PVE_API_FINGERPRINT`, `PVE_API_CA_FILE`, \
         `PVE_API_INSECURE=1` ([Backends: trusting the api server](backends.md#trusting-the-api-server)).",
    ),
    s(
        "PVE_API_CA_FILE",
        ApiBackend,
        "unset",
        "A PEM file of the CA certificates that sign the API server's certificate.",
    ),
    s(
        "PVE_API_INSECURE",
        ApiBackend,
        "unset",
        "`1`: the API server's certificate is not checked (a warning at every start).",
    ),
    s(
        "IMPORT_STORAGE",
        ApiBackend,
        "`local`",
        "Storage whose `import` content receives the images to import; checked at start-up.",
    ),
    s(
        "IMAGE_FETCH",
        ApiBackend,
        "`download`",
        "`download`: the node fetches the image itself, checked against the mirror's checksum; \
         `upload`: pvedeck uploads its own verified copy ([Backends: how images reach the node](backends.md#how-images-reach-the-node)).",
    ),
    s(
        "JOB_MAX_EVENTS",
        Jobs,
        "`5000`",
        "Relayed command output lines kept per job, 10–1000000; past it one line says the rest \
         was dropped.",
    ),
    s(
        "JOBS_KEEP_DAYS",
        Jobs,
        "`90`",
        "Ended jobs older than this many days go at start-up, 1–36500.",
    ),
    s(
        "MAX_FOLLOWERS_PER_JOB",
        Jobs,
        "`2000`",
        "Live streams of one job at once, 1–1000000; beyond, 503.",
    ),
    s(
        "MAX_FOLLOWERS",
        Jobs,
        "`10000`",
        "Live streams in all, 1–10000000; beyond, 503.",
    ),
    s(
        "MAX_FOLLOWERS_PER_CLIENT",
        Jobs,
        "`100`",
        "Live streams one client (an address, an IPv6 /64) holds of jobs it neither started nor \
         owns, 1–1000000; beyond, 503. The stream that starts a job and its owner's are never \
         refused ([Security: bounds](security.md#bounds)).",
    ),
    s(
        "REPLICA_NAME",
        Jobs,
        "the host name and a random suffix",
        "This process's name among the pvedeck processes sharing `DATABASE_URL`: what its jobs \
         and reservations are held under, and what a takeover names. Letters, digits, `.`, `_`, \
         `-`, at most 64.",
    ),
    s(
        "JOB_LEASE_SECS",
        Jobs,
        "`15`",
        "With `DATABASE_URL`: how long a replica's running jobs and VMID reservations stay its \
         own without renewal (renewed every third of it), 3–600 s. A replica that stops renewing \
         (killed, cut off) has its jobs taken over by another once it lapses \
         ([Operations: replicas](operations.md#replicas)).",
    ),
    s(
        "CONSOLE_IDLE_SECS",
        Access,
        "`900`",
        "A VM console (the browser's graphical or serial console) that has sent no key or \
         pointer event this long is closed, 10–86400 s ([Security: consoles](security.md#consoles)).",
    ),
    s(
        "CONSOLE_MAX",
        Access,
        "`64`",
        "VM consoles open at once, all users together, 1–100000; beyond, 503 \
         ([Security: consoles](security.md#consoles)).",
    ),
    s(
        "CONSOLE_BYTES_PER_SEC",
        Access,
        "`4194304`",
        "What one VM console relays per second in each direction, 16384–1073741824 bytes; \
         beyond, the relay waits ([Security: consoles](security.md#consoles)).",
    ),
    s(
        "SHUTDOWN_GRACE_SECS",
        Jobs,
        "`60`",
        "After SIGTERM, how long running jobs may go on before they are interrupted with their \
         cleanup, 0–86400 s ([Provisioning: stopping and restarts](provisioning.md#stopping-and-restarts)).",
    ),
    s(
        "SIM_SPEED",
        Simulator,
        "`1`",
        "How much faster than real time the simulated cluster runs (a positive number).",
    ),
    s(
        "SIM_CLUSTERS",
        Simulator,
        "`1`",
        "How many simulated clusters, without `CLUSTERS`: `default`, `sim2`, `sim3`… (1–32); \
         with `CLUSTERS`, it must count the clusters named there.",
    ),
    s(
        "SIM_JITTER",
        Simulator,
        "`5`",
        "How much simulated guests' memory use wanders, percent, 0–50.",
    ),
    s(
        "SIM_PVESH_MS",
        Simulator,
        "`0`",
        "Wall-clock cost of each simulated `qm`/`pvesh`/`pvesm`, as a Perl start-up has on a \
         node, 0–60000 ms (benchmarks).",
    ),
    s(
        "SIM_NODES",
        Simulator,
        "unset: the demo cluster",
        "A large cluster of this many nodes instead of the demo, 1–1000 (3 when only `SIM_VMS` \
         is set); only when `DATA_DIR/sim` holds no cluster yet.",
    ),
    s(
        "SIM_VMS",
        Simulator,
        "unset: the demo cluster",
        "VMs of that large cluster, 0–100000 (0 when only `SIM_NODES` is set).",
    ),
    s(
        "SIM_NODE_MEMORY",
        Simulator,
        "unset: 128 GiB each",
        "The large cluster's nodes' memory, GiB each in node order (`108,68,48`), 1–65536; \
         nodes past the list get its last value (placement benchmarks).",
    ),
    s(
        "COMMAND_TIMEOUT_SECS",
        Tuning,
        "`300`",
        "Timeout of a short Proxmox call (reads, `qm create`, `qm set`, power actions), \
         1–86400 s.",
    ),
    s(
        "LONG_COMMAND_TIMEOUT_SECS",
        Tuning,
        "`3600`",
        "Timeout of a long one (`qm importdisk`, `qm migrate`, a full clone, an image download \
         on the node, the init script), 1–86400 s.",
    ),
    s(
        "SNAPSHOT_INTERVAL_MS",
        Tuning,
        "`2000`",
        "How often the cluster snapshot is refreshed while anyone reads it, 10–3600000 ms \
         ([Provisioning: the cluster snapshot](provisioning.md#the-cluster-snapshot)).",
    ),
    s(
        "SNAPSHOT_IDLE_SECS",
        Tuning,
        "`60`",
        "Without a reader this long, the snapshot is not refreshed at all, 1–86400 s.",
    ),
    s(
        "MAX_PVE_COMMANDS",
        Tuning,
        "`64`",
        "Proxmox calls running at once, 1–4096; the rest wait their turn, which does not count \
         against their timeout.",
    ),
];

/// Variables read by other programs of the project, not by the server.
pub const ELSEWHERE: &[(&str, &str, &str, &str)] = &[
    (
        "SIM_API_PORT",
        "`pvedeck-sim api`",
        "`0`: a free port",
        "Port of the simulator's REST face on 127.0.0.1.",
    ),
    (
        "SIM_API_PRIVS",
        "`pvedeck-sim api`",
        "pvedeck's role",
        "The privileges the simulated token has, on every path (comma list).",
    ),
    (
        "SIM_API_MS",
        "`pvedeck-sim api`",
        "`0`",
        "Latency added to every answer, ms (benchmarks).",
    ),
    (
        "SIM_UPLOAD_MAX_BYTES",
        "`pvedeck-sim api`",
        "16 GiB",
        "The largest upload taken; beyond, 413.",
    ),
    (
        "SIM_USER_TAG_ACCESS",
        "`pvedeck-sim api`",
        "unset (`free`)",
        "datacenter.cfg's `user-tag-access` as `/cluster/options` shows it (`user-allow=list,user-allow-list=a;b`).",
    ),
    (
        "SIM_REGISTERED_TAGS",
        "`pvedeck-sim api`",
        "none",
        "datacenter.cfg's `registered-tags` (`a;b`): tags only `Sys.Modify` on `/` may set.",
    ),
    (
        "PVEDECK_SIM_NODE",
        "the `qm`/`pvesh`/`pvesm` stand-ins",
        "`MAIN_NODE`",
        "The node a stand-in runs on.",
    ),
    (
        "SIM_GUESTS",
        "the stand-ins",
        "unset (simulated guests)",
        "`qemu`: the VMs are real QEMU machines booted from `SIM_GUEST_DIR`'s image (`cargo xtask guest`).",
    ),
    (
        "SIM_GUEST_DIR",
        "the stand-ins",
        "none",
        "With `SIM_GUESTS=qemu`: the directory of the guest image's `vmlinuz` and `initrd.img`.",
    ),
    (
        "SIM_REAL_SSH",
        "the `ssh` stand-in",
        "`/usr/bin/ssh`",
        "With `SIM_GUESTS=qemu`: the `ssh` a connection to a VM is handed to.",
    ),
    (
        "SIM_MIRROR_DIR",
        "`pvedeck-sim mirror`",
        "none",
        "A directory whose files the mirror serves before its own (the guest lane's image and `SHA512SUMS`).",
    ),
    (
        "PVEDECK_URL",
        "`pvedeck-cli`",
        "`http://127.0.0.1:8080`",
        "The server (`--url`).",
    ),
    (
        "PVEDECK_TOKEN",
        "`pvedeck-cli`",
        "none",
        "A token of `API_TOKENS` (`--token`).",
    ),
    (
        "PVEDECK_TEST_BACKEND",
        "the integration tests",
        "`sim`",
        "Their lane: `cli` or `api` ([Development](development.md)).",
    ),
];

/// The whole of `docs/configuration.md`.
pub fn markdown() -> String {
    let mut out = String::from(
        "# Configuration\n\n\
         <!-- Generated from crates/config/src/reference.rs by `cargo xtask docs`; edit it \
         there. A test fails when this file is stale. -->\n\n\
         pvedeck is configured by environment variables only; a `.env` file in the working \
         directory is read first (it does not override what the environment already says), \
         and `.env.example` shows a commented one. The Debian package reads \
         `/etc/pvedeck/pvedeck.env` ([Operations](operations.md)).\n\n\
         - Values are trimmed, and an empty value counts as unset.\n\
         - A bad value stops the server at start with exit code 2 and one line naming the \
         variable, the value and what is expected, e.g. \
         `GATEWAY=192.168.0 is not an IPv4 address` or \
         `GATEWAY is not set: required when PVE_BACKEND=cli`. Secrets are never echoed.\n\
         - With no configuration at all, pvedeck runs on its simulated cluster \
         (`PVE_BACKEND=sim`): nothing else is needed.\n",
    );
    for group in Group::ALL {
        out.push_str(&format!(
            "\n## {}\n\n| variable | default | meaning |\n|---|---|---|\n",
            group.title()
        ));
        for setting in SETTINGS.iter().filter(|s| s.group == group) {
            out.push_str(&format!(
                "| `{}` | {} | {} |\n",
                setting.name, setting.default, setting.meaning
            ));
        }
    }
    out.push_str(
        "\n## Read by the other programs\n\n| variable | read by | default | meaning |\n\
         |---|---|---|---|\n",
    );
    for (name, reader, default, meaning) in ELSEWHERE {
        out.push_str(&format!(
            "| `{name}` | {reader} | {default} | {meaning} |\n"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::PathBuf;

    use super::*;

    /// `cargo xtask docs` runs this with `UPDATE_DOCS=1` to write the file.
    #[test]
    fn generated_docs_are_current() {
        let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md");
        pvedeck_testkit::generated_file(&file, &markdown());
    }

    #[test]
    fn every_variable_read_is_described_and_every_described_one_read() {
        let described: BTreeSet<&str> = SETTINGS.iter().map(|s| s.name).collect();
        assert_eq!(
            described.len(),
            SETTINGS.len(),
            "a variable is described twice"
        );
        let read = crate::tests::variables_read();
        assert_eq!(read, described);
    }
}
