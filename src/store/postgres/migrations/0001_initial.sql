-- pvedeck's first PostgreSQL schema: what the SQLite store keeps, in the
-- same columns, with integer times in milliseconds since the epoch.

CREATE TABLE jobs (
    id          BIGSERIAL PRIMARY KEY,
    kind        TEXT    NOT NULL,
    vmid        BIGINT,
    state       TEXT    NOT NULL,
    title       TEXT    NOT NULL,
    created     BIGINT  NOT NULL,
    finished    BIGINT,
    outcome     TEXT,
    failed_step TEXT,
    node        TEXT,
    on_stop     TEXT,
    task        TEXT,
    owner       TEXT
);
CREATE INDEX jobs_running ON jobs (id) WHERE state = 'running';
CREATE INDEX jobs_owner ON jobs (owner, id);
CREATE INDEX jobs_finished ON jobs (finished) WHERE finished IS NOT NULL;

CREATE TABLE events (
    job_id   BIGINT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    seq      BIGINT NOT NULL,
    at       BIGINT NOT NULL,
    step     TEXT   NOT NULL,
    status   TEXT   NOT NULL,
    message  TEXT   NOT NULL,
    vm_id    BIGINT,
    ip       TEXT,
    host_key TEXT,
    PRIMARY KEY (job_id, seq)
);

CREATE TABLE identities (
    vmid       BIGINT PRIMARY KEY,
    machine_id TEXT   NOT NULL,
    host_key   TEXT   NOT NULL,
    recorded   BIGINT NOT NULL
);

CREATE TABLE templates (
    vmid  BIGINT PRIMARY KEY,
    image TEXT   NOT NULL,
    built BIGINT NOT NULL,
    job   BIGINT NOT NULL
);

CREATE TABLE users (
    name    TEXT   PRIMARY KEY,
    role    TEXT   NOT NULL,
    groups  TEXT   NOT NULL,
    quota   TEXT,
    source  TEXT   NOT NULL,
    created BIGINT NOT NULL
);

CREATE TABLE tokens (
    id        TEXT   PRIMARY KEY,
    "user"    TEXT   NOT NULL REFERENCES users (name) ON DELETE CASCADE,
    name      TEXT   NOT NULL,
    hash      TEXT   NOT NULL UNIQUE,
    created   BIGINT NOT NULL,
    expires   BIGINT,
    last_used BIGINT
);

CREATE TABLE owners (
    vmid     BIGINT PRIMARY KEY,
    "user"   TEXT   NOT NULL,
    assigned BIGINT NOT NULL
);

CREATE TABLE audit (
    id      BIGSERIAL PRIMARY KEY,
    at      BIGINT NOT NULL,
    "user"  TEXT   NOT NULL,
    client  TEXT,
    action  TEXT   NOT NULL,
    target  TEXT,
    summary TEXT   NOT NULL,
    outcome TEXT   NOT NULL
);
CREATE INDEX audit_at ON audit (at);

-- The people's version: every change of users, tokens (not their last use)
-- or owners moves it, and says so on the `pvedeck_people` channel, so that
-- every pvedeck on the database reads them again.
CREATE TABLE people_version (
    one     BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
    version BIGINT  NOT NULL
);
INSERT INTO people_version (version) VALUES (1);

CREATE FUNCTION people_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE people_version SET version = version + 1;
    PERFORM pg_notify('pvedeck_people', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER users_changed AFTER INSERT OR UPDATE OR DELETE ON users
    FOR EACH STATEMENT EXECUTE FUNCTION people_changed();
CREATE TRIGGER tokens_changed AFTER INSERT OR DELETE ON tokens
    FOR EACH STATEMENT EXECUTE FUNCTION people_changed();
CREATE TRIGGER owners_changed AFTER INSERT OR UPDATE OR DELETE ON owners
    FOR EACH STATEMENT EXECUTE FUNCTION people_changed();
