-- The counters, leases and reservations of store/pgstore, and the functions
-- that admit, settle and sweep in one round trip each.
--
-- Keys: rule is the sluice.CounterKey.Rule fingerprint reinterpreted as a
-- signed bigint; subject is compared byte by byte (COLLATE "C").
--
-- Lock order: every transaction acquires the rows it writes in one global
-- order, by counter key (rule, subject, period), a counter's lease rows at
-- their counter's place, and waits for nothing out of that order, so none can
-- deadlock another:
--
--   - Admit and Settle get each row with a statement of its own, in key
--     order: an UPDATE (or, for a missing row, an INSERT ... ON CONFLICT DO
--     NOTHING and the UPDATE again), so a row is created or locked before the
--     next is touched. The caller sorts the charges.
--   - Settle deletes its reservation row before it touches anything else:
--     it may wait there for a sweep settling the same batch, holding
--     nothing, and then finds the row gone.
--   - Sweep takes reservation rows with SKIP LOCKED, then their counters in
--     key order in one INSERT ... ON CONFLICT DO UPDATE ... WHERE false (which
--     creates or locks, row by row, without writing an existing row); its
--     housekeeping (sluice_cleanup) uses SKIP LOCKED and never waits.
--   - A lease row is written at its counter's place in that order (Admit and
--     Sweep hold the counter; Settle deletes only its own batch's lease), and
--     by the cleanup, which skips locked rows.
--
-- Admit applies each charge as it locks its row (one write per counter, the
-- least a transaction that changes it can do) and, when the batch is
-- refused, puts back what it applied before committing: all or nothing, as
-- no other transaction can see a row it holds.
--
-- Times are Unix nanoseconds. The functions take p_now: NULL means the
-- database clock (clock_timestamp() when the call starts), a value means the
-- caller's pinned clock (tests only).
--
-- Kinds: 1 rate, 2 budget, 3 concurrency.
--
-- Rate arithmetic is memstore's (counter.go), exact: a bucket's state is
-- (tat, frac, drawn_at), the time it is full again in ns plus frac/drawn_at
-- ns, drawn at the limit drawn_at. At time now it has drawn
-- d = (tat - now) * drawn_at + frac units times the window (none if
-- negative); a charge of n units draws n * window more, and fits while
-- d <= burst * window. Products are numeric, never rounded. A changed limit
-- keeps the units drawn, as in memstore.

CREATE TABLE sluice_counters (
	rule          bigint NOT NULL,
	subject       text   COLLATE "C" NOT NULL,
	period        bigint NOT NULL,
	-- Rate: see above. prev_* hold the state before the last admission, so
	-- that a refused batch can put it back exactly.
	tat           bigint NOT NULL DEFAULT 0,
	frac          bigint NOT NULL DEFAULT 0,
	drawn_at      bigint NOT NULL DEFAULT 0,
	prev_tat      bigint NOT NULL DEFAULT 0,
	prev_frac     bigint NOT NULL DEFAULT 0,
	prev_drawn_at bigint NOT NULL DEFAULT 0,
	-- Budget: settled usage, open reservations, end of the period.
	used          bigint NOT NULL DEFAULT 0,
	reserved      bigint NOT NULL DEFAULT 0,
	period_end    bigint NOT NULL DEFAULT 0,
	-- Last write: the sweep drops idle counters only after a grace period,
	-- so that a busy counter is not created anew.
	touched       bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (rule, subject, period)
) WITH (fillfactor = 70); -- room on the page for HOT updates

-- Concurrency leases: one row per admitted batch and key. Expired leases
-- count for nothing and are deleted by the next admission on their key or by
-- the sweep.
CREATE TABLE sluice_leases (
	rule     bigint NOT NULL,
	subject  text   COLLATE "C" NOT NULL,
	period   bigint NOT NULL,
	batch_id bigint NOT NULL,
	expiry   bigint NOT NULL,
	PRIMARY KEY (rule, subject, period, batch_id)
);
CREATE INDEX sluice_leases_expiry ON sluice_leases (expiry);

-- Open reservations: one row per admitted batch with a budget charge, with
-- its charges as admitted (the sweep uses the budget charges, kind 2, and the
-- leases, kind 3). Settle and Sweep delete the row, so whichever comes first
-- settles the batch and the other finds nothing.
CREATE TABLE sluice_reservations (
	batch_id   bigint     PRIMARY KEY,
	deadline   bigint     NOT NULL,
	kind       smallint[] NOT NULL,
	rule       bigint[]   NOT NULL,
	subject    text[]     COLLATE "C" NOT NULL,
	period     bigint[]   NOT NULL,
	amount     bigint[]   NOT NULL,
	period_end bigint[]   NOT NULL,
	release    boolean[]  NOT NULL
);
CREATE INDEX sluice_reservations_deadline ON sluice_reservations (deadline);

-- sluice_now returns the database clock in Unix nanoseconds (microsecond
-- resolution).
CREATE FUNCTION sluice_now() RETURNS bigint LANGUAGE sql VOLATILE AS $$
	SELECT (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint
$$;

-- sluice_adjusted is where a bucket drawn d = (tat - now) * drawn_at + frac
-- stands after settlement moves it by dw (units times window): a refund
-- (dw < 0) gives room back down to a full bucket, an overrun draws it into
-- debt of at most cap2 (two bursts times the window). It is memstore's
-- bucket.adjust; a one-expression SQL function, inlined where it is called.
CREATE FUNCTION sluice_adjusted(p_tat bigint, p_frac bigint, p_drawn_at bigint, p_now bigint, dw numeric, cap2 numeric)
RETURNS numeric LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE WHEN dw > 0
		THEN least(greatest((p_tat - p_now)::numeric * p_drawn_at + p_frac, 0) + dw, cap2)
		ELSE greatest(greatest((p_tat - p_now)::numeric * p_drawn_at + p_frac, 0) + dw, 0)
	END
$$;

-- sluice_admit evaluates a batch of charges (arrays, one element per charge,
-- sorted by key) and, when every charge that is not shadow fits, applies all
-- of them; otherwise none. With p_peek it only evaluates, at an amount of
-- zero, without locking or writing.
CREATE FUNCTION sluice_admit(
	p_now bigint, p_peek boolean, p_batch bigint, p_ttl bigint,
	p_kind smallint[], p_rule bigint[], p_subject text[], p_period bigint[],
	p_limit bigint[], p_burst bigint[], p_window bigint[], p_period_end bigint[],
	p_amount bigint[], p_shadow boolean[], p_release boolean[],
	OUT admitted boolean, OUT allowed boolean[], OUT remaining bigint[], OUT used bigint[],
	OUT retry_after bigint[], OUT reset_at bigint[])
LANGUAGE plpgsql AS $$
DECLARE
	n        int := coalesce(array_length(p_kind, 1), 0);
	now_ns   bigint := coalesce(p_now, sluice_now());
	applied  boolean[] := array_fill(false, ARRAY[n]);
	huge     numeric := 4611686018427387904; -- 2^62, memstore's bound on a quotient
	amt      bigint;
	lim      bigint;
	win      bigint;
	aw       numeric;
	bw       numeric;
	d0       numeric;
	d1       numeric;
	ok       boolean;
	c_tat    bigint;
	c_frac   bigint;
	c_drawn  bigint;
	c_used   bigint;
	c_res    bigint;
	in_use   bigint;
	held     bigint;
	earliest bigint;
BEGIN
	allowed := array_fill(false, ARRAY[n]);
	remaining := array_fill(0::bigint, ARRAY[n]);
	used := array_fill(0::bigint, ARRAY[n]);
	retry_after := array_fill(0::bigint, ARRAY[n]);
	reset_at := array_fill(0::bigint, ARRAY[n]);
	admitted := true;

	FOR i IN 1..n LOOP
		amt := CASE WHEN p_peek THEN 0 ELSE p_amount[i] END;
		lim := p_limit[i];
		CASE p_kind[i]
		WHEN 1 THEN -- rate: memstore bucket.check
			win := p_window[i];
			aw := amt::numeric * win;
			bw := p_burst[i]::numeric * win;
			IF admitted AND NOT p_peek THEN
				-- Lock and draw in one write; d1 is capped so that tat fits.
				LOOP
					UPDATE sluice_counters c
					SET prev_tat = c.tat, prev_frac = c.frac, prev_drawn_at = c.drawn_at,
						tat = now_ns + div(least(greatest((c.tat - now_ns)::numeric * c.drawn_at + c.frac, 0) + aw, huge * lim), lim),
						frac = mod(least(greatest((c.tat - now_ns)::numeric * c.drawn_at + c.frac, 0) + aw, huge * lim), lim),
						drawn_at = lim, touched = now_ns
					WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i]
					RETURNING c.tat, c.frac INTO c_tat, c_frac;
					EXIT WHEN FOUND;
					INSERT INTO sluice_counters (rule, subject, period) VALUES (p_rule[i], p_subject[i], p_period[i])
					ON CONFLICT DO NOTHING;
				END LOOP;
				applied[i] := true;
				d1 := (c_tat - now_ns)::numeric * lim + c_frac;
				d0 := d1 - aw;
			ELSE
				SELECT c.tat, c.frac, c.drawn_at INTO c_tat, c_frac, c_drawn
				FROM sluice_counters c
				WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i];
				d0 := greatest(coalesce((c_tat - now_ns)::numeric * c_drawn + c_frac, 0), 0);
				d1 := d0 + aw;
			END IF;
			ok := d1 <= huge * lim;
			IF ok AND d1 <= bw THEN
				allowed[i] := true;
				remaining[i] := div(bw - d1, win);
				reset_at[i] := now_ns + div(d1 + lim - 1, lim);
			ELSE
				remaining[i] := CASE WHEN d0 > bw THEN 0 ELSE div(bw - d0, win) END;
				reset_at[i] := now_ns + div(d0 + lim - 1, lim);
				retry_after[i] := CASE WHEN ok THEN div(d1 - bw + lim - 1, lim) ELSE huge END;
			END IF;
			used[i] := p_burst[i] - remaining[i];
		WHEN 2 THEN -- budget: a spent budget refuses even a charge of zero
			IF admitted AND NOT p_peek THEN
				LOOP
					UPDATE sluice_counters c
					SET reserved = c.reserved + amt, period_end = p_period_end[i], touched = now_ns
					WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i]
					RETURNING c.used, c.reserved - amt INTO c_used, c_res;
					EXIT WHEN FOUND;
					INSERT INTO sluice_counters (rule, subject, period) VALUES (p_rule[i], p_subject[i], p_period[i])
					ON CONFLICT DO NOTHING;
				END LOOP;
				applied[i] := true;
			ELSE
				SELECT c.used, c.reserved INTO c_used, c_res
				FROM sluice_counters c
				WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i];
			END IF;
			in_use := coalesce(c_used, 0) + coalesce(c_res, 0);
			allowed[i] := in_use + amt <= lim AND (amt > 0 OR in_use < lim);
			IF allowed[i] THEN
				in_use := in_use + amt;
			END IF;
			used[i] := in_use;
			remaining[i] := greatest(0, lim - in_use);
			reset_at[i] := p_period_end[i];
		WHEN 3 THEN -- concurrency: expired leases are pruned, live ones counted
			IF admitted AND NOT p_peek THEN
				LOOP
					UPDATE sluice_counters c SET touched = now_ns
					WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i];
					EXIT WHEN FOUND;
					INSERT INTO sluice_counters (rule, subject, period) VALUES (p_rule[i], p_subject[i], p_period[i])
					ON CONFLICT DO NOTHING;
				END LOOP;
				WITH pruned AS (
					DELETE FROM sluice_leases l
					WHERE l.rule = p_rule[i] AND l.subject = p_subject[i] AND l.period = p_period[i] AND l.expiry <= now_ns
				)
				SELECT count(*), min(l.expiry) INTO held, earliest
				FROM sluice_leases l
				WHERE l.rule = p_rule[i] AND l.subject = p_subject[i] AND l.period = p_period[i] AND l.expiry > now_ns;
			ELSE
				SELECT count(*), min(l.expiry) INTO held, earliest
				FROM sluice_leases l
				WHERE l.rule = p_rule[i] AND l.subject = p_subject[i] AND l.period = p_period[i] AND l.expiry > now_ns;
			END IF;
			allowed[i] := held < lim;
			IF allowed[i] AND NOT p_peek THEN
				held := held + 1;
			END IF;
			used[i] := held;
			remaining[i] := greatest(0, lim - held);
			IF earliest IS NOT NULL THEN
				reset_at[i] := earliest;
				IF NOT allowed[i] THEN
					retry_after[i] := earliest - now_ns;
				END IF;
			END IF;
		END CASE;
		IF NOT allowed[i] AND NOT p_shadow[i] THEN
			admitted := false;
		END IF;
	END LOOP;
	IF p_peek THEN
		RETURN;
	END IF;

	IF NOT admitted THEN
		-- Put back what was applied before the refusal was known.
		FOR i IN 1..n LOOP
			CONTINUE WHEN NOT applied[i];
			IF p_kind[i] = 1 THEN
				UPDATE sluice_counters c SET tat = c.prev_tat, frac = c.prev_frac, drawn_at = c.prev_drawn_at
				WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i];
			ELSE
				UPDATE sluice_counters c SET reserved = c.reserved - p_amount[i]
				WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i];
			END IF;
		END LOOP;
		RETURN;
	END IF;

	FOR i IN 1..n LOOP
		IF p_kind[i] = 1 AND NOT allowed[i] AND p_amount[i] = 0 THEN
			-- A shadow charge of nothing over its limit changes nothing.
			UPDATE sluice_counters c SET tat = c.prev_tat, frac = c.prev_frac, drawn_at = c.prev_drawn_at
			WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i];
		ELSIF p_kind[i] = 1 AND NOT allowed[i] THEN
			-- A shadow charge over its limit is drawn like an overrun: into
			-- debt of at most one burst.
			bw := 2 * p_burst[i]::numeric * p_window[i];
			UPDATE sluice_counters c
			SET tat = now_ns + div(bw, p_limit[i]), frac = mod(bw, p_limit[i])
			WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i]
				AND (c.tat - now_ns)::numeric * p_limit[i] + c.frac > bw;
		ELSIF p_kind[i] = 3 THEN
			INSERT INTO sluice_leases (rule, subject, period, batch_id, expiry)
			VALUES (p_rule[i], p_subject[i], p_period[i], p_batch, now_ns + p_ttl)
			ON CONFLICT DO NOTHING;
		END IF;
	END LOOP;
	IF 2 = ANY(p_kind) THEN
		INSERT INTO sluice_reservations (batch_id, deadline, kind, rule, subject, period, amount, period_end, release)
		VALUES (p_batch, now_ns + p_ttl, p_kind, p_rule, p_subject, p_period, p_amount, p_period_end, p_release);
	END IF;
END
$$;

-- sluice_settle replaces a batch's charges by their actual amounts and frees
-- its leases, one write per charge. The caller sends only the charges with
-- something to do (rates whose actual differs, budgets, leases), sorted by
-- key. A batch with a budget charge is settled only if its reservation row
-- is still there; the function deletes it, so a second settle, or one after
-- the sweep, returns false and changes nothing.
CREATE FUNCTION sluice_settle(
	p_now bigint, p_batch bigint,
	p_kind smallint[], p_rule bigint[], p_subject text[], p_period bigint[],
	p_limit bigint[], p_burst bigint[], p_window bigint[], p_period_end bigint[],
	p_amount bigint[], p_actual bigint[])
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
	n      int := coalesce(array_length(p_kind, 1), 0);
	now_ns bigint := coalesce(p_now, sluice_now());
	dw     numeric;
	cap2   numeric;
BEGIN
	IF 2 = ANY(p_kind) THEN
		-- First, holding nothing: waiting here for a sweep that holds the
		-- row cannot deadlock, and finds the row gone once it commits.
		DELETE FROM sluice_reservations WHERE batch_id = p_batch;
		IF NOT FOUND THEN
			RETURN false;
		END IF;
	END IF;
	FOR i IN 1..n LOOP
		CASE p_kind[i]
		WHEN 1 THEN -- memstore bucket.adjust: a refund down to a full bucket, an overrun into debt of at most one burst
			dw := (p_actual[i] - p_amount[i])::numeric * p_window[i];
			cap2 := 2 * p_burst[i]::numeric * p_window[i];
			LOOP
				UPDATE sluice_counters c
				SET tat = now_ns + div(sluice_adjusted(c.tat, c.frac, c.drawn_at, now_ns, dw, cap2), p_limit[i]),
					frac = mod(sluice_adjusted(c.tat, c.frac, c.drawn_at, now_ns, dw, cap2), p_limit[i]),
					drawn_at = p_limit[i], touched = now_ns
				WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i];
				EXIT WHEN FOUND;
				INSERT INTO sluice_counters (rule, subject, period) VALUES (p_rule[i], p_subject[i], p_period[i])
				ON CONFLICT DO NOTHING;
			END LOOP;
		WHEN 2 THEN
			LOOP
				UPDATE sluice_counters c
				SET reserved = greatest(0, c.reserved - p_amount[i]), used = c.used + p_actual[i],
					period_end = p_period_end[i], touched = now_ns
				WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i];
				EXIT WHEN FOUND;
				INSERT INTO sluice_counters (rule, subject, period) VALUES (p_rule[i], p_subject[i], p_period[i])
				ON CONFLICT DO NOTHING;
			END LOOP;
		WHEN 3 THEN
			DELETE FROM sluice_leases l
			WHERE l.rule = p_rule[i] AND l.subject = p_subject[i] AND l.period = p_period[i] AND l.batch_id = p_batch;
		END CASE;
	END LOOP;
	RETURN true;
END
$$;

-- sluice_sweep settles up to p_max reservations past their deadline: leases
-- are freed, budget charges charged their amount or refunded (release).
-- FOR UPDATE SKIP LOCKED lets several replicas sweep at once: each row is
-- taken by one sweeper, and a row being settled by Settle is skipped (and
-- deleted by it). The counters of every reservation taken are locked
-- together, in key order.
CREATE FUNCTION sluice_sweep(p_now bigint, p_max int,
	OUT reservations int, OUT charged int, OUT released int)
LANGUAGE plpgsql AS $$
DECLARE
	now_ns bigint := coalesce(p_now, sluice_now());
	ids    bigint[];
BEGIN
	SELECT coalesce(array_agg(r.batch_id), '{}') INTO ids
	FROM (SELECT batch_id FROM sluice_reservations WHERE deadline <= now_ns
		ORDER BY deadline LIMIT p_max FOR UPDATE SKIP LOCKED) r;
	reservations := coalesce(array_length(ids, 1), 0);
	charged := 0;
	released := 0;
	IF reservations = 0 THEN
		RETURN;
	END IF;
	INSERT INTO sluice_counters AS c (rule, subject, period)
	SELECT DISTINCT x.rule, x.subject COLLATE "C", x.period
	FROM sluice_reservations r, unnest(r.kind, r.rule, r.subject, r.period) AS x(kind, rule, subject, period)
	WHERE r.batch_id = ANY(ids) AND x.kind IN (2, 3)
	ORDER BY 1, 2, 3
	ON CONFLICT (rule, subject, period) DO UPDATE SET tat = c.tat WHERE false;
	UPDATE sluice_counters c
	SET reserved = greatest(0, c.reserved - s.amount), used = c.used + s.charge, period_end = s.period_end,
		touched = now_ns
	FROM (
		SELECT x.rule, x.subject, x.period, sum(x.amount) AS amount,
			sum(CASE WHEN x.release THEN 0 ELSE x.amount END) AS charge, max(x.period_end) AS period_end
		FROM sluice_reservations r,
			unnest(r.kind, r.rule, r.subject, r.period, r.amount, r.period_end, r.release)
				AS x(kind, rule, subject, period, amount, period_end, release)
		WHERE r.batch_id = ANY(ids) AND x.kind = 2
		GROUP BY x.rule, x.subject, x.period
	) s
	WHERE c.rule = s.rule AND c.subject = s.subject AND c.period = s.period;
	DELETE FROM sluice_leases l
	USING sluice_reservations r, unnest(r.kind, r.rule, r.subject, r.period) AS x(kind, rule, subject, period)
	WHERE r.batch_id = ANY(ids) AND x.kind = 3
		AND l.rule = x.rule AND l.subject = x.subject AND l.period = x.period AND l.batch_id = r.batch_id;
	SELECT count(*) FILTER (WHERE NOT x.release), count(*) FILTER (WHERE x.release) INTO charged, released
	FROM sluice_reservations r, unnest(r.kind, r.release) AS x(kind, release)
	WHERE r.batch_id = ANY(ids) AND x.kind = 2;
	DELETE FROM sluice_reservations WHERE batch_id = ANY(ids);
END
$$;

-- sluice_cleanup deletes up to p_max expired leases, and the idle counters
-- among p_max counters from key p_from on, wrapping around (a full bucket, no open
-- reservation, no usage in a live period, no live lease, untouched for
-- p_grace ns). The caller picks p_from at random: each call reads a bounded
-- slice of the table, and calls cover all of it in time. Rows another
-- transaction holds are skipped, so it never waits. An idle counter row holds
-- nothing an absent row does not.
CREATE FUNCTION sluice_cleanup(p_now bigint, p_max int, p_grace bigint, p_from bigint,
	OUT leases int, OUT counters int)
LANGUAGE plpgsql AS $$
DECLARE
	now_ns bigint := coalesce(p_now, sluice_now());
BEGIN
	WITH gone AS (
		SELECT rule, subject, period, batch_id FROM sluice_leases WHERE expiry <= now_ns
		LIMIT p_max FOR UPDATE SKIP LOCKED
	)
	DELETE FROM sluice_leases l USING gone
	WHERE l.rule = gone.rule AND l.subject = gone.subject AND l.period = gone.period AND l.batch_id = gone.batch_id;
	GET DIAGNOSTICS leases = ROW_COUNT;
	WITH slice AS (
		(SELECT rule, subject, period FROM sluice_counters WHERE (rule, subject, period) >= (p_from, '', 0)
			ORDER BY rule, subject, period LIMIT p_max)
		UNION ALL -- wrapping around: a small table is read whole
		(SELECT rule, subject, period FROM sluice_counters WHERE (rule, subject, period) < (p_from, '', 0)
			ORDER BY rule, subject, period LIMIT p_max)
		LIMIT p_max
	), idle AS (
		SELECT c.rule, c.subject, c.period
		FROM sluice_counters c JOIN slice USING (rule, subject, period)
		WHERE c.touched <= now_ns - p_grace AND (c.tat < now_ns OR c.tat = now_ns AND c.frac = 0)
			AND c.reserved = 0 AND (c.used = 0 OR c.period_end <= now_ns)
			AND NOT EXISTS (SELECT 1 FROM sluice_leases l WHERE l.rule = c.rule
				AND l.subject = c.subject AND l.period = c.period AND l.expiry > now_ns)
		FOR UPDATE OF c SKIP LOCKED
	)
	DELETE FROM sluice_counters c USING idle
	WHERE c.rule = idle.rule AND c.subject = idle.subject AND c.period = idle.period;
	GET DIAGNOSTICS counters = ROW_COUNT;
END
$$;
