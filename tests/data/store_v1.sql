-- A run store written by flowctl 0.1 (schema version 1): DDL and two runs (one succeeded, one waiting).
CREATE TABLE flowctl_definitions (
	digest VARCHAR(64) NOT NULL, 
	files TEXT NOT NULL, 
	PRIMARY KEY (digest)
);
INSERT INTO "flowctl_definitions" VALUES('19b89853f3930318577de022bfbff38d5c7c6930fb0bbba28453f2a3170ebdbc','{"orchestration/contracts/echo.v1.0.0.yaml": "id: echo\nversion: 1.0.0\nentrypoint: tk:echo\n", "orchestration/states/a.yaml": "id: a\ntype: task\ntool: echo@1.0.0\ninput: {name: input.name}\n", "orchestration/states/done.yaml": "id: done\ntype: succeed\n", "orchestration/states/w.yaml": "id: w\ntype: wait\nduration: 1h\n", "orchestration/transitions/f.yaml": "flow: f\nversion: 1\nstart: a\ntransitions:\n  - {from: a, to: done, set: {echo: response.echo}}\n", "orchestration/transitions/g.yaml": "flow: g\nversion: 1\nstart: a\ntransitions:\n  - {from: a, to: w}\n  - {from: w, to: done}\n"}');
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
	PRIMARY KEY (run_id, seq)
);
INSERT INTO "flowctl_events" VALUES('01a22a5c115d33678038eb17',1,1.796007006562125206e+09,'run_started',NULL,NULL,'{"flow":"f","flow_version":1,"digest":"19b89853f3930318577de022bfbff38d5c7c6930fb0bbba28453f2a3170ebdbc","input":{"name":"Zoë"},"params":{},"git_commit":null,"owner":"vm:9476","parent":null}','','2aa6c4f997aa10f22ccea0ef2794bceb6fe5b51483173a916d3b21cdd6932f66');
INSERT INTO "flowctl_events" VALUES('01a22a5c115d33678038eb17',2,1.79600700657310533526e+09,'state_entered','a',1,'{"type":"task","step":1,"visit":1}','2aa6c4f997aa10f22ccea0ef2794bceb6fe5b51483173a916d3b21cdd6932f66','fe0b40de59768a13f3e7bdcddbd64100f27279f96ff5ade2a2c98bf5c693f982');
INSERT INTO "flowctl_events" VALUES('01a22a5c115d33678038eb17',3,1796007006.57336,'tool_invoked','a',1,'{"tool":"echo@1.0.0","input":{"name":"Zoë"},"idempotency_key":"01a22a5c115d33678038eb17:a:1","timeout_s":30.0,"flow_version":1,"digest":"19b89853f3930318577de022bfbff38d5c7c6930fb0bbba28453f2a3170ebdbc"}','fe0b40de59768a13f3e7bdcddbd64100f27279f96ff5ade2a2c98bf5c693f982','ad567431c12fb83831a32f61de3e052fc682619abbfeee42195df0ee0b89e7d0');
INSERT INTO "flowctl_events" VALUES('01a22a5c115d33678038eb17',4,1.79600700657870793338e+09,'tool_succeeded','a',1,'{"tool":"echo@1.0.0","output":{"echo":{"name":"Zoë"}},"duration_ms":0.213}','ad567431c12fb83831a32f61de3e052fc682619abbfeee42195df0ee0b89e7d0','d56a32288e63e6bbffea157ce310d5f936dd5d7ca77e84f0420ab29395effbf9');
INSERT INTO "flowctl_events" VALUES('01a22a5c115d33678038eb17',5,1.79600700657895255086e+09,'transition_taken','a',1,'{"to":"done","conditions":[{"when":null,"result":true}],"line":5}','d56a32288e63e6bbffea157ce310d5f936dd5d7ca77e84f0420ab29395effbf9','66076674879caada0ab5eb4f7e61b70f19e6930d7661016ad98649b4155a5dc9');
INSERT INTO "flowctl_events" VALUES('01a22a5c115d33678038eb17',6,1.79600700659386730193e+09,'state_entered','done',1,'{"type":"succeed","step":2,"visit":1}','66076674879caada0ab5eb4f7e61b70f19e6930d7661016ad98649b4155a5dc9','edbac5523738812559c6bb32b0461848a39c141b3337a3a8fd4f9e3e8ecf1f3a');
INSERT INTO "flowctl_events" VALUES('01a22a5c115d33678038eb17',7,1.79600700659397482876e+09,'run_succeeded','done',NULL,'{"output":{"echo":{"name":"Zoë"}}}','edbac5523738812559c6bb32b0461848a39c141b3337a3a8fd4f9e3e8ecf1f3a','b280b75c978020424d45abed742e0e5e3eeb79c9d904f7890dcd78646a4ac904');
INSERT INTO "flowctl_events" VALUES('01a22a5c173b3d8cc896f8b8',1,1.79600700805982685086e+09,'run_started',NULL,NULL,'{"flow":"g","flow_version":1,"digest":"19b89853f3930318577de022bfbff38d5c7c6930fb0bbba28453f2a3170ebdbc","input":{"name":"x"},"params":{},"git_commit":null,"owner":"vm:9534","parent":null}','','f65fa4a9e61a716522a09a13061a8a5e38ac32ee13773cc4ccf3a9109a8fb255');
INSERT INTO "flowctl_events" VALUES('01a22a5c173b3d8cc896f8b8',2,1.79600700807475614547e+09,'state_entered','a',1,'{"type":"task","step":1,"visit":1}','f65fa4a9e61a716522a09a13061a8a5e38ac32ee13773cc4ccf3a9109a8fb255','82f2164ccede2810979ff40d2cf5a4e03d66cc624ab1bc32b762e40c4dae23b5');
INSERT INTO "flowctl_events" VALUES('01a22a5c173b3d8cc896f8b8',3,1.79600700807496237751e+09,'tool_invoked','a',1,'{"tool":"echo@1.0.0","input":{"name":"x"},"idempotency_key":"01a22a5c173b3d8cc896f8b8:a:1","timeout_s":30.0,"flow_version":1,"digest":"19b89853f3930318577de022bfbff38d5c7c6930fb0bbba28453f2a3170ebdbc"}','82f2164ccede2810979ff40d2cf5a4e03d66cc624ab1bc32b762e40c4dae23b5','7657e2765c1f1c8f2720b20d4df36cdd73968a881c2e03445a4724cf44cff630');
INSERT INTO "flowctl_events" VALUES('01a22a5c173b3d8cc896f8b8',4,1.79600700807563257218e+09,'tool_succeeded','a',1,'{"tool":"echo@1.0.0","output":{"echo":{"name":"x"}},"duration_ms":0.134}','7657e2765c1f1c8f2720b20d4df36cdd73968a881c2e03445a4724cf44cff630','e96b02b6934221ea03c00c6724f6ec45cf235afaf4215e758a059e2ae915def0');
INSERT INTO "flowctl_events" VALUES('01a22a5c173b3d8cc896f8b8',5,1.79600700807569789883e+09,'transition_taken','a',1,'{"to":"w","conditions":[{"when":null,"result":true}],"line":5}','e96b02b6934221ea03c00c6724f6ec45cf235afaf4215e758a059e2ae915def0','fa676e63dd2035c8da51042a2cd429172193cfa019b3bd5ef47345236ee07eb3');
INSERT INTO "flowctl_events" VALUES('01a22a5c173b3d8cc896f8b8',6,1.79600700808138012882e+09,'state_entered','w',1,'{"type":"wait","step":2,"visit":1}','fa676e63dd2035c8da51042a2cd429172193cfa019b3bd5ef47345236ee07eb3','5fcaba421098b98c15d145f5b7aad9cecf2e434373f6cc26174b668077fbf5bd');
INSERT INTO "flowctl_events" VALUES('01a22a5c173b3d8cc896f8b8',7,1.79600700808145809176e+09,'wait_started','w',NULL,'{"due":"2026-11-30T03:50:08.081Z"}','5fcaba421098b98c15d145f5b7aad9cecf2e434373f6cc26174b668077fbf5bd','c09f4ff69621b5fe2c28c1bba5c55107e9a7dbafb227c201f3c00a07789ce7c4');
INSERT INTO "flowctl_events" VALUES('01a22a5c173b3d8cc896f8b8',8,1.79600700808148860932e+09,'run_paused','w',1,'{"status":"waiting","pending":{"kind":"wait","state":"w","due":1796010608.0814235},"available_at":1796010608.0814235}','c09f4ff69621b5fe2c28c1bba5c55107e9a7dbafb227c201f3c00a07789ce7c4','79d5b9b607753c00a8e34760c0ed2d6272f2a14be5afc42d1dc22cf87247f45c');
CREATE TABLE flowctl_gate_log (
	id INTEGER NOT NULL, 
	at FLOAT NOT NULL, 
	tool VARCHAR(200) NOT NULL, 
	flow VARCHAR(200) NOT NULL, 
	run_id VARCHAR(40) NOT NULL, 
	digest VARCHAR(64) NOT NULL, 
	PRIMARY KEY (id)
);
CREATE TABLE flowctl_meta (
	"key" VARCHAR(64) NOT NULL, 
	value TEXT NOT NULL, 
	PRIMARY KEY ("key")
);
INSERT INTO "flowctl_meta" VALUES('schema_version','1');
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
	PRIMARY KEY (id)
);
INSERT INTO "flowctl_runs" VALUES('01a22a5c115d33678038eb17','f','1','19b89853f3930318577de022bfbff38d5c7c6930fb0bbba28453f2a3170ebdbc',NULL,'succeeded','{"name":"Zoë"}','{}','{"echo":{"name":"Zoë"}}',NULL,'{"after_compensation":null,"attempt":1,"context":{"echo":{"name":"Zoë"}},"depth":0,"done":true,"entered":true,"error":null,"fanout":null,"inflight":null,"parent":null,"path":["a","done"],"pending":null,"residue":[],"response":{"echo":{"name":"Zoë"}},"review":null,"saga":[],"state":"done","state_info":{"attempt":1,"entered_at":"2026-11-30T02:50:06.588Z","id":"done"},"step":2,"visits":{"a":1,"done":1}}',1.79600700654916930198e+09,1.79600700659399199485e+09,NULL,'vm:9476',7,'b280b75c978020424d45abed742e0e5e3eeb79c9d904f7890dcd78646a4ac904',2);
INSERT INTO "flowctl_runs" VALUES('01a22a5c173b3d8cc896f8b8','g','1','19b89853f3930318577de022bfbff38d5c7c6930fb0bbba28453f2a3170ebdbc',NULL,'waiting','{"name":"x"}','{}',NULL,NULL,'{"after_compensation":null,"attempt":1,"context":{},"depth":0,"done":false,"entered":true,"error":null,"fanout":null,"inflight":null,"parent":null,"path":["a","w"],"pending":{"due":1796010608.0814235,"kind":"wait","state":"w"},"residue":[],"response":{"echo":{"name":"x"}},"review":null,"saga":[],"state":"w","state_info":{"attempt":1,"entered_at":"2026-11-30T02:50:08.081Z","id":"w"},"step":2,"visits":{"a":1,"w":1}}',1.79600700805343651772e+09,1.79600700808149743082e+09,1.79601060808142352106e+09,'vm:9534',8,'79d5b9b607753c00a8e34760c0ed2d6272f2a14be5afc42d1dc22cf87247f45c',2);
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
CREATE INDEX ix_flowctl_runs_parent_id ON flowctl_runs (parent_id);
CREATE INDEX ix_flowctl_runs_flow ON flowctl_runs (flow);
CREATE INDEX ix_flowctl_runs_status ON flowctl_runs (status);
CREATE INDEX ix_flowctl_gate_log_at ON flowctl_gate_log (at);
