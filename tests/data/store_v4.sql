-- A run store written by flowctl before issue 17 (schema version 4): DDL and four runs of the
-- project in test_store_schema.py (f succeeded, g waiting an hour, two of r paused for review).
CREATE TABLE flowctl_definitions (
	digest VARCHAR(64) NOT NULL, 
	files TEXT NOT NULL, 
	PRIMARY KEY (digest)
);
INSERT INTO "flowctl_definitions" VALUES('35bc2637d3d4c8e1cb6bf96af1cf4c968abe5f65e999a80c0d4e90042d856ca9','{"orchestration/contracts/echo.v1.0.0.yaml": "id: echo\nversion: 1.0.0\nentrypoint: tk:echo\n", "orchestration/states/a.yaml": "id: a\ntype: task\ntool: echo@1.0.0\ninput: {name: input.name}\n", "orchestration/states/done.yaml": "id: done\ntype: succeed\n", "orchestration/states/rev.yaml": "id: rev\ntype: review\nshow: {name: input.name}\ndecisions: [approve, reject]\ntimeout: 1h\nremind_after: 10m\non_timeout: {goto: done}\n", "orchestration/states/w.yaml": "id: w\ntype: wait\nduration: 1h\n", "orchestration/transitions/f.yaml": "flow: f\nversion: 1\nstart: a\ntransitions:\n  - {from: a, to: done, set: {echo: response.echo}}\n", "orchestration/transitions/g.yaml": "flow: g\nversion: 1\nstart: a\ntransitions:\n  - {from: a, to: w}\n  - {from: w, to: done}\n", "orchestration/transitions/r.yaml": "flow: r\nversion: 1\nstart: a\ntransitions:\n  - {from: a, to: rev}\n  - {from: rev, to: done, when: \"review.decision == ''approve''\"}\n  - {from: rev, to: done}\n"}');
CREATE TABLE flowctl_events (
	run_id VARCHAR(40) NOT NULL, 
	seq INTEGER NOT NULL, 
	ts FLOAT NOT NULL, 
	type VARCHAR(40) NOT NULL, 
	state VARCHAR(200), 
	attempt INTEGER, 
	data TEXT, 
	prev_hash VARCHAR(64) NOT NULL, 
	hash VARCHAR(64) NOT NULL, 
	fence INTEGER, 
	PRIMARY KEY (run_id, seq)
);
INSERT INTO "flowctl_events" VALUES('01a232032d3a16abb80a2e31',1,1.79613539871884918212e+09,'run_started',NULL,NULL,'{"flow":"f","flow_version":1,"digest":"35bc2637d3d4c8e1cb6bf96af1cf4c968abe5f65e999a80c0d4e90042d856ca9","input":{"name":"Zoë"},"params":{},"git_commit":null,"owner":"vm:12610","parent":null}','','325136880597efc0f3be8b1cec783f3899cc70dbe4e830fe8a5423e2900e7f10',NULL);
INSERT INTO "flowctl_events" VALUES('01a232032d3a16abb80a2e31',2,1.7961353987218782902e+09,'state_entered','a',1,'{"type":"task","step":1,"visit":1}','325136880597efc0f3be8b1cec783f3899cc70dbe4e830fe8a5423e2900e7f10','10f89c247eebf1cf78b9c4758fad81d8b89eee496ae5dc982c69d6d38ba81ef2',NULL);
INSERT INTO "flowctl_events" VALUES('01a232032d3a16abb80a2e31',3,1.7961353987220385074e+09,'tool_invoked','a',1,'{"tool":"echo@1.0.0","input":{"name":"Zoë"},"idempotency_key":"01a232032d3a16abb80a2e31:a:1","timeout_s":30.0}','10f89c247eebf1cf78b9c4758fad81d8b89eee496ae5dc982c69d6d38ba81ef2','e4219f90dae4d73bd833a7da1bb75c7c49510b3920220543a749bb23961416b5',NULL);
INSERT INTO "flowctl_events" VALUES('01a232032d3a16abb80a2e31',4,1.79613539872222638133e+09,'tool_succeeded','a',1,'{"tool":"echo@1.0.0","output":{"echo":{"name":"Zoë"}},"duration_ms":0.164}','e4219f90dae4d73bd833a7da1bb75c7c49510b3920220543a749bb23961416b5','c95c5441e735aefef0a46e9d8803f368dddeff8ec5f88dca8686883ec05f454f',NULL);
INSERT INTO "flowctl_events" VALUES('01a232032d3a16abb80a2e31',5,1.79613539872231626507e+09,'transition_taken','a',1,'{"to":"done","conditions":[{"when":null,"result":true}],"line":5}','c95c5441e735aefef0a46e9d8803f368dddeff8ec5f88dca8686883ec05f454f','31a58a84bc7b42378cade569ded7115f5b640648ea2947f92c4347a37be43fe1',NULL);
INSERT INTO "flowctl_events" VALUES('01a232032d3a16abb80a2e31',6,1.79613539872748184198e+09,'state_entered','done',1,'{"type":"succeed","step":2,"visit":1}','31a58a84bc7b42378cade569ded7115f5b640648ea2947f92c4347a37be43fe1','89f60ec83f77bba78fb751b0f5773daa6631dcca85cc22cd99730b6090be616d',NULL);
INSERT INTO "flowctl_events" VALUES('01a232032d3a16abb80a2e31',7,1.79613539872749567033e+09,'run_succeeded','done',NULL,'{"output":{"echo":{"name":"Zoë"}}}','89f60ec83f77bba78fb751b0f5773daa6631dcca85cc22cd99730b6090be616d','ce4e2717bda10a48139346bbe8e81f3f6948e868ca72697d2df1c690f31b32e3',NULL);
INSERT INTO "flowctl_events" VALUES('01a232033038cdf82fbd091b',1,1.79613539948064899445e+09,'run_started',NULL,NULL,'{"flow":"g","flow_version":1,"digest":"35bc2637d3d4c8e1cb6bf96af1cf4c968abe5f65e999a80c0d4e90042d856ca9","input":{"name":"Zoë"},"params":{},"git_commit":null,"owner":"vm:12639","parent":null}','','d4b242499854484c425d773e72b2a0976f4cc8913ec4e683d4b9d1d560221971',NULL);
INSERT INTO "flowctl_events" VALUES('01a232033038cdf82fbd091b',2,1.79613539949106550217e+09,'state_entered','a',1,'{"type":"task","step":1,"visit":1}','d4b242499854484c425d773e72b2a0976f4cc8913ec4e683d4b9d1d560221971','c4787ef339cd60c4db72123237d82f2d9f6ce4ccab86f4b0b8f5e9c9d68a5f89',NULL);
INSERT INTO "flowctl_events" VALUES('01a232033038cdf82fbd091b',3,1.79613539949121689799e+09,'tool_invoked','a',1,'{"tool":"echo@1.0.0","input":{"name":"Zoë"},"idempotency_key":"01a232033038cdf82fbd091b:a:1","timeout_s":30.0}','c4787ef339cd60c4db72123237d82f2d9f6ce4ccab86f4b0b8f5e9c9d68a5f89','d66047f8a2cfdebd7e63f8d6b8ca18b1c583a41dfbccf78d47c1a3bca51b2fd9',NULL);
INSERT INTO "flowctl_events" VALUES('01a232033038cdf82fbd091b',4,1.79613539949130606647e+09,'tool_succeeded','a',1,'{"tool":"echo@1.0.0","output":{"echo":{"name":"Zoë"}},"duration_ms":0.072}','d66047f8a2cfdebd7e63f8d6b8ca18b1c583a41dfbccf78d47c1a3bca51b2fd9','c4a181544a741bb33af34692b1da3e1014c3a4e377bdf095d58fad43f5e329b9',NULL);
INSERT INTO "flowctl_events" VALUES('01a232033038cdf82fbd091b',5,1.79613539949135255814e+09,'transition_taken','a',1,'{"to":"w","conditions":[{"when":null,"result":true}],"line":5}','c4a181544a741bb33af34692b1da3e1014c3a4e377bdf095d58fad43f5e329b9','37e24d68c0d160a4198516668df375a7720ce0e78c0a04f5abb62febd72d5e71',NULL);
INSERT INTO "flowctl_events" VALUES('01a232033038cdf82fbd091b',6,1.79613539949249315262e+09,'state_entered','w',1,'{"type":"wait","step":2,"visit":1}','37e24d68c0d160a4198516668df375a7720ce0e78c0a04f5abb62febd72d5e71','9a65574dc021a72e7e28b2bfb668be5b17e4e19b007fcf0392a8654832275e14',NULL);
INSERT INTO "flowctl_events" VALUES('01a232033038cdf82fbd091b',7,1.79613539949254250524e+09,'wait_started','w',NULL,'{"due":"2026-12-01T15:29:59.492Z"}','9a65574dc021a72e7e28b2bfb668be5b17e4e19b007fcf0392a8654832275e14','ac3a8adbe00d973d77317b01205310688a57a032566b740ff35bb3c6b82ae228',NULL);
INSERT INTO "flowctl_events" VALUES('01a232033038cdf82fbd091b',8,1.79613539949255251884e+09,'run_paused','w',1,'{"status":"waiting","pending":{"kind":"wait","state":"w","due":1796138999.492503},"available_at":1796138999.492503}','ac3a8adbe00d973d77317b01205310688a57a032566b740ff35bb3c6b82ae228','6ad1a9c9b1920dc9c8f49de120b6defef1e0ade3119fe8297f463c2c3c00a89a',NULL);
INSERT INTO "flowctl_events" VALUES('01a23203322456ea21650300',1,1.79613539997273516648e+09,'run_started',NULL,NULL,'{"flow":"r","flow_version":1,"digest":"35bc2637d3d4c8e1cb6bf96af1cf4c968abe5f65e999a80c0d4e90042d856ca9","input":{"name":"Zoë"},"params":{},"git_commit":null,"owner":"vm:12650","parent":null}','','6b243153216e13de6019c55986cf9a38591074a08202412ddc261292311a4caa',NULL);
INSERT INTO "flowctl_events" VALUES('01a23203322456ea21650300',2,1.79613539997527599332e+09,'state_entered','a',1,'{"type":"task","step":1,"visit":1}','6b243153216e13de6019c55986cf9a38591074a08202412ddc261292311a4caa','f48ffb58b6fd8f8ab4bbc7febe1340fdada4be26acf87e84705b865fbfcbe40f',NULL);
INSERT INTO "flowctl_events" VALUES('01a23203322456ea21650300',3,1.79613539997537946697e+09,'tool_invoked','a',1,'{"tool":"echo@1.0.0","input":{"name":"Zoë"},"idempotency_key":"01a23203322456ea21650300:a:1","timeout_s":30.0}','f48ffb58b6fd8f8ab4bbc7febe1340fdada4be26acf87e84705b865fbfcbe40f','61aa268344abf633ae62d6237bd5da69733775480a04e81db430013100ab9538',NULL);
INSERT INTO "flowctl_events" VALUES('01a23203322456ea21650300',4,1.79613539997545623781e+09,'tool_succeeded','a',1,'{"tool":"echo@1.0.0","output":{"echo":{"name":"Zoë"}},"duration_ms":0.059}','61aa268344abf633ae62d6237bd5da69733775480a04e81db430013100ab9538','31df6f7b38436dabf28b808af60c5342278eb633c0d7f2502d52f55f87d01f08',NULL);
INSERT INTO "flowctl_events" VALUES('01a23203322456ea21650300',5,1.79613539997549486165e+09,'transition_taken','a',1,'{"to":"rev","conditions":[{"when":null,"result":true}],"line":5}','31df6f7b38436dabf28b808af60c5342278eb633c0d7f2502d52f55f87d01f08','5a3b11ff7742dcc1911cf00c20fbed8a6bf75ab192fd99a328fe59bf98799cf9',NULL);
INSERT INTO "flowctl_events" VALUES('01a23203322456ea21650300',6,1.79613539997627735139e+09,'state_entered','rev',1,'{"type":"review","step":2,"visit":1}','5a3b11ff7742dcc1911cf00c20fbed8a6bf75ab192fd99a328fe59bf98799cf9','37826792cb0f99a9dd37e5d123e64c8f97da8952f8a3e608b0e188855c530829',NULL);
INSERT INTO "flowctl_events" VALUES('01a23203322456ea21650300',7,1.79613539997637701038e+09,'review_requested','rev',NULL,'{"show":{"name":"Zoë"},"decisions":["approve","reject"],"deadline":"2026-12-01T15:29:59.976Z"}','37826792cb0f99a9dd37e5d123e64c8f97da8952f8a3e608b0e188855c530829','d83180f8846eb996a0c657678f25ce9da9fc4c2e037475ace4d081828f127ee1',NULL);
INSERT INTO "flowctl_events" VALUES('01a23203322456ea21650300',8,1.79613539997638845448e+09,'run_paused','rev',1,'{"status":"paused","pending":{"kind":"review","state":"rev","decisions":["approve","reject"],"show":{"name":"Zoë"},"deadline":1796138999.9763305,"remind_at":1796135999.9763453},"available_at":null}','d83180f8846eb996a0c657678f25ce9da9fc4c2e037475ace4d081828f127ee1','7056aa2ed71ae477586e81060e0108f7f2174727136d07a5fa063765362a8c89',NULL);
INSERT INTO "flowctl_events" VALUES('01a23203338ab7c91d39d4af',1,1.79613540033062624927e+09,'run_started',NULL,NULL,'{"flow":"r","flow_version":1,"digest":"35bc2637d3d4c8e1cb6bf96af1cf4c968abe5f65e999a80c0d4e90042d856ca9","input":{"name":"Zoë"},"params":{},"git_commit":null,"owner":"vm:12652","parent":null}','','4b53b08dc634878745c2211f5a65c5f2db93515e9fb8b5e2899e51472d72f564',NULL);
INSERT INTO "flowctl_events" VALUES('01a23203338ab7c91d39d4af',2,1.79613540033330106732e+09,'state_entered','a',1,'{"type":"task","step":1,"visit":1}','4b53b08dc634878745c2211f5a65c5f2db93515e9fb8b5e2899e51472d72f564','f5cffb05b6ed8f7fa24974e538470df92355d22c29803fde16c691ead2bd24a5',NULL);
INSERT INTO "flowctl_events" VALUES('01a23203338ab7c91d39d4af',3,1.79613540033339595799e+09,'tool_invoked','a',1,'{"tool":"echo@1.0.0","input":{"name":"Zoë"},"idempotency_key":"01a23203338ab7c91d39d4af:a:1","timeout_s":30.0}','f5cffb05b6ed8f7fa24974e538470df92355d22c29803fde16c691ead2bd24a5','46b47598186afaa38667e8df03a2700ab8dd271b70a62d4fe1f3fcae93f14b8c',NULL);
INSERT INTO "flowctl_events" VALUES('01a23203338ab7c91d39d4af',4,1.7961354003334636688e+09,'tool_succeeded','a',1,'{"tool":"echo@1.0.0","output":{"echo":{"name":"Zoë"}},"duration_ms":0.054}','46b47598186afaa38667e8df03a2700ab8dd271b70a62d4fe1f3fcae93f14b8c','af5bbf1ab167fc666b3cd20efabbdae4b5631b39f61b5f07423a6583d8a3b405',NULL);
INSERT INTO "flowctl_events" VALUES('01a23203338ab7c91d39d4af',5,1.79613540033350086214e+09,'transition_taken','a',1,'{"to":"rev","conditions":[{"when":null,"result":true}],"line":5}','af5bbf1ab167fc666b3cd20efabbdae4b5631b39f61b5f07423a6583d8a3b405','744d6df70dff731ea6d1ba2e2ff435fae0f8daefd7770af66f33a7d3ad732677',NULL);
INSERT INTO "flowctl_events" VALUES('01a23203338ab7c91d39d4af',6,1.7961354003342571259e+09,'state_entered','rev',1,'{"type":"review","step":2,"visit":1}','744d6df70dff731ea6d1ba2e2ff435fae0f8daefd7770af66f33a7d3ad732677','c51b195211b53c9a24a1aaedb73a98ded1397d093d1868a4301dd3267ba0e228',NULL);
INSERT INTO "flowctl_events" VALUES('01a23203338ab7c91d39d4af',7,1.79613540033434438704e+09,'review_requested','rev',NULL,'{"show":{"name":"Zoë"},"decisions":["approve","reject"],"deadline":"2026-12-01T15:30:00.334Z"}','c51b195211b53c9a24a1aaedb73a98ded1397d093d1868a4301dd3267ba0e228','59be29612bd401726692242a94858ae3257e02be67b9b47dd30bb73ab676bb1c',NULL);
INSERT INTO "flowctl_events" VALUES('01a23203338ab7c91d39d4af',8,1.79613540033435583114e+09,'run_paused','rev',1,'{"status":"paused","pending":{"kind":"review","state":"rev","decisions":["approve","reject"],"show":{"name":"Zoë"},"deadline":1796139000.3343084,"remind_at":1796136000.3343217},"available_at":null}','59be29612bd401726692242a94858ae3257e02be67b9b47dd30bb73ab676bb1c','d075aa05b76d2065c76c2129cd8986a3c328586af417cb60656e9ac49bb78f51',NULL);
CREATE TABLE flowctl_gate_log (
	id INTEGER NOT NULL, 
	at FLOAT NOT NULL, 
	tool VARCHAR(200) NOT NULL, 
	flow VARCHAR(200) NOT NULL, 
	run_id VARCHAR(40) NOT NULL, 
	digest VARCHAR(64) NOT NULL, 
	PRIMARY KEY (id)
);
CREATE TABLE flowctl_limits (
	scope VARCHAR(16) NOT NULL, 
	name VARCHAR(200) NOT NULL, 
	max_running INTEGER NOT NULL, 
	PRIMARY KEY (scope, name)
);
CREATE TABLE flowctl_meta (
	"key" VARCHAR(64) NOT NULL, 
	value TEXT NOT NULL, 
	PRIMARY KEY ("key")
);
INSERT INTO "flowctl_meta" VALUES('schema_version','4');
CREATE TABLE flowctl_reviews (
	run_id VARCHAR(40) NOT NULL, 
	step_no INTEGER NOT NULL, 
	state VARCHAR(200) NOT NULL, 
	token_hash VARCHAR(64) NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	data TEXT, 
	deadline FLOAT, 
	decided_at FLOAT, 
	PRIMARY KEY (run_id, step_no)
);
CREATE TABLE flowctl_runs (
	id VARCHAR(40) NOT NULL, 
	flow VARCHAR(200) NOT NULL, 
	flow_version VARCHAR(40), 
	digest VARCHAR(64) NOT NULL, 
	parent_id VARCHAR(40), 
	status VARCHAR(16) NOT NULL, 
	input TEXT, 
	params TEXT, 
	output TEXT, 
	error TEXT, 
	cursor TEXT, 
	created_at FLOAT NOT NULL, 
	updated_at FLOAT NOT NULL, 
	available_at FLOAT, 
	owner VARCHAR(200), 
	last_seq INTEGER NOT NULL, 
	last_hash VARCHAR(64) NOT NULL, 
	steps INTEGER NOT NULL, 
	queue VARCHAR(100) DEFAULT 'default' NOT NULL, 
	priority INTEGER DEFAULT '0' NOT NULL, 
	lease_until FLOAT, 
	fence INTEGER DEFAULT '0' NOT NULL, 
	cancel_requested TEXT, 
	seal VARCHAR(64), 
	PRIMARY KEY (id)
);
INSERT INTO "flowctl_runs" VALUES('01a232032d3a16abb80a2e31','f','1','35bc2637d3d4c8e1cb6bf96af1cf4c968abe5f65e999a80c0d4e90042d856ca9',NULL,'succeeded','{"name":"Zoë"}','{}','{"echo":{"name":"Zoë"}}',NULL,'{"state":"done","entered":true,"step":2,"attempt":1,"visits":{"a":1,"done":1},"path":["a","done"],"context":{"echo":{"name":"Zoë"}},"response":{"echo":{"name":"Zoë"}},"error":null,"review":null,"saga":[],"residue":[],"inflight":null,"pending":null,"after_compensation":null,"state_info":{"id":"done","entered_at":"2026-12-01T14:29:58.727Z","attempt":1},"done":true,"fanout":null,"depth":0,"parent":null}',1.79613539871302986148e+09,1.79613539872750091553e+09,NULL,'vm:12610',7,'ce4e2717bda10a48139346bbe8e81f3f6948e868ca72697d2df1c690f31b32e3',2,'default',0,NULL,0,NULL,'e1fb0c18b180c0867e253b2a9e8eceda7cebb3a7cb3707f6ac31b53b502d5d27');
INSERT INTO "flowctl_runs" VALUES('01a232033038cdf82fbd091b','g','1','35bc2637d3d4c8e1cb6bf96af1cf4c968abe5f65e999a80c0d4e90042d856ca9',NULL,'waiting','{"name":"Zoë"}','{}',NULL,NULL,'{"state":"w","entered":true,"step":2,"attempt":1,"visits":{"a":1,"w":1},"path":["a","w"],"context":{},"response":{"echo":{"name":"Zoë"}},"error":null,"review":null,"saga":[],"residue":[],"inflight":null,"pending":{"kind":"wait","state":"w","due":1796138999.492503},"after_compensation":null,"state_info":{"id":"w","entered_at":"2026-12-01T14:29:59.492Z","attempt":1},"done":false,"fanout":null,"depth":0,"parent":null}',1.7961353994795553684e+09,1.79613539949255943302e+09,1.79613899949250292774e+09,'vm:12639',8,'6ad1a9c9b1920dc9c8f49de120b6defef1e0ade3119fe8297f463c2c3c00a89a',2,'default',0,NULL,0,NULL,'ea3f718e393c66c470c0ef664f0f66a6b78a8d47a0383dbb3bd7b14ba9bcfefc');
INSERT INTO "flowctl_runs" VALUES('01a23203322456ea21650300','r','1','35bc2637d3d4c8e1cb6bf96af1cf4c968abe5f65e999a80c0d4e90042d856ca9',NULL,'paused','{"name":"Zoë"}','{}',NULL,NULL,'{"state":"rev","entered":true,"step":2,"attempt":1,"visits":{"a":1,"rev":1},"path":["a","rev"],"context":{},"response":{"echo":{"name":"Zoë"}},"error":null,"review":null,"saga":[],"residue":[],"inflight":null,"pending":{"kind":"review","state":"rev","token_hash":"6fa0913bc2e85d1b091a5aabb9d91e3e45dd02f1d68c596bd7a115655c113e97","decisions":["approve","reject"],"show":{"name":"Zoë"},"deadline":1796138999.9763305,"remind_at":1796135999.9763453},"after_compensation":null,"state_info":{"id":"rev","entered_at":"2026-12-01T14:29:59.976Z","attempt":1},"done":false,"fanout":null,"depth":0,"parent":null}',1.79613539997162342072e+09,1.7961353999763996601e+09,1.79613599997634530063e+09,'vm:12650',8,'7056aa2ed71ae477586e81060e0108f7f2174727136d07a5fa063765362a8c89',2,'default',0,NULL,0,NULL,'3a9076879d00bf76663bc57ec10d7252e731bd718096b1c643fc085b22c87bf1');
INSERT INTO "flowctl_runs" VALUES('01a23203338ab7c91d39d4af','r','1','35bc2637d3d4c8e1cb6bf96af1cf4c968abe5f65e999a80c0d4e90042d856ca9',NULL,'paused','{"name":"Zoë"}','{}',NULL,NULL,'{"state":"rev","entered":true,"step":2,"attempt":1,"visits":{"a":1,"rev":1},"path":["a","rev"],"context":{},"response":{"echo":{"name":"Zoë"}},"error":null,"review":null,"saga":[],"residue":[],"inflight":null,"pending":{"kind":"review","state":"rev","token_hash":"6ef15ed585893490724b6aa8aaf43b671af7bc7a94a471268a3ce6c9bd9423f5","decisions":["approve","reject"],"show":{"name":"Zoë"},"deadline":1796139000.3343084,"remind_at":1796136000.3343217},"after_compensation":null,"state_info":{"id":"rev","entered_at":"2026-12-01T14:30:00.334Z","attempt":1},"done":false,"fanout":null,"depth":0,"parent":null}',1.79613540032971692088e+09,1.79613540033436417577e+09,1.79613600033432173732e+09,'vm:12652',8,'d075aa05b76d2065c76c2129cd8986a3c328586af417cb60656e9ac49bb78f51',2,'default',0,NULL,0,NULL,'bcfcfd2801be880f07095ca00e0e8c70dcd4831cfcdce9b0e28103ba4b719725');
CREATE TABLE flowctl_steps (
	run_id VARCHAR(40) NOT NULL, 
	step_no INTEGER NOT NULL, 
	attempt INTEGER NOT NULL, 
	state VARCHAR(200) NOT NULL, 
	tool VARCHAR(200), 
	idempotency_key VARCHAR(500), 
	status VARCHAR(16) NOT NULL, 
	input TEXT, 
	output TEXT, 
	started_at FLOAT, 
	finished_at FLOAT, 
	PRIMARY KEY (run_id, step_no, attempt)
);
CREATE TABLE flowctl_workers (
	id VARCHAR(200) NOT NULL, 
	host VARCHAR(200) NOT NULL, 
	pid INTEGER NOT NULL, 
	queues TEXT, 
	concurrency INTEGER NOT NULL, 
	lease_s FLOAT NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	started_at FLOAT NOT NULL, 
	heartbeat_at FLOAT NOT NULL, 
	runs_done INTEGER DEFAULT '0' NOT NULL, 
	PRIMARY KEY (id)
);
CREATE INDEX ix_flowctl_runs_due ON flowctl_runs (priority DESC, available_at) WHERE status IN ('queued', 'waiting', 'paused');
CREATE INDEX ix_flowctl_runs_lease ON flowctl_runs (lease_until) WHERE status = 'running';
CREATE INDEX ix_flowctl_runs_owner ON flowctl_runs (owner);
CREATE INDEX ix_flowctl_runs_flow ON flowctl_runs (flow);
CREATE INDEX ix_flowctl_runs_status ON flowctl_runs (status);
CREATE INDEX ix_flowctl_runs_parent_id ON flowctl_runs (parent_id);
CREATE INDEX ix_flowctl_gate_log_at ON flowctl_gate_log (at);
