-- Several pvedeck processes on one database: who holds each running job
-- and each VMID being installed, until when; sessions any of them can
-- read; and what each does, announced to the others as it happens.

ALTER TABLE jobs ADD COLUMN replica TEXT, ADD COLUMN lease_until BIGINT;

-- A VMID held by an install: unique across every replica by the key; a
-- lease that ran out (its replica died) may be taken by another install.
CREATE TABLE vmid_reservations (
    vmid    BIGINT PRIMARY KEY,
    replica TEXT   NOT NULL,
    until   BIGINT NOT NULL
);

-- UI sessions by the SHA-256 of their id (never the id): a login on one
-- replica works on all.
CREATE TABLE sessions (
    hash    TEXT   PRIMARY KEY,
    subject TEXT   NOT NULL,
    expires BIGINT NOT NULL
);
CREATE INDEX sessions_expires ON sessions (expires);

-- A follower on one replica of a job running on another hears of each
-- event as it is committed, and of the job's end.
CREATE FUNCTION event_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pvedeck_events', NEW.job_id || ' ' || NEW.seq);
    RETURN NULL;
END
$$;
CREATE TRIGGER events_added AFTER INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION event_added();

CREATE FUNCTION job_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state = 'running' AND NEW.state <> 'running' THEN
        PERFORM pg_notify('pvedeck_jobs', NEW.id::text);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_ended AFTER UPDATE OF state ON jobs
    FOR EACH ROW EXECUTE FUNCTION job_ended();

CREATE FUNCTION session_closed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pvedeck_sessions', OLD.hash);
    RETURN NULL;
END
$$;
CREATE TRIGGER sessions_closed AFTER DELETE ON sessions
    FOR EACH ROW EXECUTE FUNCTION session_closed();
