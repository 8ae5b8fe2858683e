-- Several Proxmox clusters on one pvedeck: a VMID is a VM only within its
-- cluster, so what is kept by VMID is kept by (cluster, VMID). Rows from
-- before are the `default` cluster's, the name of the one cluster of a
-- configuration without CLUSTERS.

ALTER TABLE jobs ADD COLUMN cluster TEXT NOT NULL DEFAULT 'default';

ALTER TABLE identities ADD COLUMN cluster TEXT NOT NULL DEFAULT 'default';
ALTER TABLE identities DROP CONSTRAINT identities_pkey;
ALTER TABLE identities ADD PRIMARY KEY (cluster, vmid);

ALTER TABLE templates ADD COLUMN cluster TEXT NOT NULL DEFAULT 'default';
ALTER TABLE templates DROP CONSTRAINT templates_pkey;
ALTER TABLE templates ADD PRIMARY KEY (cluster, vmid);

ALTER TABLE owners ADD COLUMN cluster TEXT NOT NULL DEFAULT 'default';
ALTER TABLE owners DROP CONSTRAINT owners_pkey;
ALTER TABLE owners ADD PRIMARY KEY (cluster, vmid);

ALTER TABLE vmid_reservations ADD COLUMN cluster TEXT NOT NULL DEFAULT 'default';
ALTER TABLE vmid_reservations DROP CONSTRAINT vmid_reservations_pkey;
ALTER TABLE vmid_reservations ADD PRIMARY KEY (cluster, vmid);
