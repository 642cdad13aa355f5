package transfer

import (
	"context"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/sshapi/sshapi/internal/storage"
)

// The persistence of object-storage uploads (migration 0004_object_uploads).

func (s *sqlDB) UploadSave(ctx context.Context, p *UploadSaveParams) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("save upload: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	u := p.Upload
	for _, q := range []string{`DELETE FROM transfer_parts WHERE transfer_id = ? AND seq = ?`,
		`DELETE FROM transfer_uploads WHERE transfer_id = ? AND seq = ?`} {
		if _, err := tx.ExecContext(ctx, s.q(q), p.ID, u.Seq); err != nil {
			return fmt.Errorf("save upload: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO transfer_uploads (transfer_id, seq, upload_id, dst, part_size, src_etag,
		hash_off, hash_state, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		p.ID, u.Seq, u.UploadID, u.Dst, u.PartSize, u.SrcETag, u.HashOff, u.HashState, micros(p.Now)); err != nil {
		return fmt.Errorf("save upload: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("save upload: %w", err)
	}
	return nil
}

func (s *sqlDB) UploadsList(ctx context.Context, p *TransferGetParams) (map[int64]*UploadRecord, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT seq, upload_id, dst, part_size, src_etag, hash_off, hash_state
		FROM transfer_uploads WHERE transfer_id = ?`), p.ID)
	if err != nil {
		return nil, fmt.Errorf("load uploads: %w", err)
	}
	out := map[int64]*UploadRecord{}
	for rows.Next() {
		u := &UploadRecord{}
		if err := rows.Scan(&u.Seq, &u.UploadID, &u.Dst, &u.PartSize, &u.SrcETag, &u.HashOff, &u.HashState); err != nil {
			rows.Close()
			return nil, fmt.Errorf("load uploads: %w", err)
		}
		out[u.Seq] = u
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load uploads: %w", err)
	}
	rows, err = s.db.QueryContext(ctx, s.q(`SELECT seq, part, size, etag, sha256 FROM transfer_parts WHERE transfer_id = ?
		ORDER BY seq, part`), p.ID)
	if err != nil {
		return nil, fmt.Errorf("load parts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		var pt storage.Part
		var sum string
		if err := rows.Scan(&seq, &pt.Number, &pt.Size, &pt.ETag, &sum); err != nil {
			return nil, fmt.Errorf("load parts: %w", err)
		}
		u := out[seq]
		if u == nil {
			continue
		}
		if pt.SHA256, err = hex.DecodeString(sum); err != nil {
			return nil, fmt.Errorf("load parts: part %d of item %d: %w", pt.Number, seq, err)
		}
		pt.Offset = int64(pt.Number-1) * u.PartSize
		u.Parts = append(u.Parts, pt)
	}
	return out, rows.Err()
}

func (s *sqlDB) PartDone(ctx context.Context, p *PartDoneParams) (Status, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("record part: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO transfer_parts (transfer_id, seq, part, size, etag, sha256)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (transfer_id, seq, part) DO UPDATE SET size = excluded.size, etag = excluded.etag,
		sha256 = excluded.sha256`), p.ID, p.Seq, p.Part.Number, p.Part.Size, p.Part.ETag, hex.EncodeToString(p.Part.SHA256)); err != nil {
		return "", fmt.Errorf("record part: %w", err)
	}
	if p.HashState != nil {
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE transfer_uploads SET hash_off = ?, hash_state = ?
			WHERE transfer_id = ? AND seq = ? AND hash_off < ?`), p.HashOff, p.HashState, p.ID, p.Seq, p.HashOff); err != nil {
			return "", fmt.Errorf("record part: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE transfer_items SET bytes_done = ? WHERE transfer_id = ? AND seq = ?`),
		p.BytesDone, p.ID, p.Seq); err != nil {
		return "", fmt.Errorf("record part: %w", err)
	}
	var st Status
	if err := tx.QueryRowContext(ctx, s.q(`UPDATE transfers SET bytes_read = CASE WHEN ? > bytes_read THEN ? ELSE bytes_read END
		WHERE id = ? RETURNING status`), p.BytesRead, p.BytesRead, p.ID).Scan(&st); err != nil {
		return "", fmt.Errorf("record part: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("record part: %w", err)
	}
	return st, nil
}

func (s *sqlDB) UploadDelete(ctx context.Context, p *RangesResetParams) error {
	for _, q := range []string{`DELETE FROM transfer_parts WHERE transfer_id = ? AND seq = ?`,
		`DELETE FROM transfer_uploads WHERE transfer_id = ? AND seq = ?`} {
		if _, err := s.db.ExecContext(ctx, s.q(q), p.ID, p.Seq); err != nil {
			return fmt.Errorf("forget upload: %w", err)
		}
	}
	return nil
}

func (s *sqlDB) UploadsStale(ctx context.Context, p *UploadsStaleParams) ([]StaleUpload, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	now := micros(p.Now)
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT u.transfer_id, t.owner, t.dst_system, u.seq, u.upload_id, u.dst
		FROM transfer_uploads u JOIN transfers t ON t.id = u.transfer_id
		WHERE t.lease_until < ? AND (t.status IN ('succeeded', 'failed', 'canceled') OR u.created_at < ?)
		ORDER BY u.created_at LIMIT ?`), now, micros(p.Before), limit)
	if err != nil {
		return nil, fmt.Errorf("stale uploads: %w", err)
	}
	defer rows.Close()
	var out []StaleUpload
	for rows.Next() {
		var u StaleUpload
		if err := rows.Scan(&u.TransferID, &u.Owner, &u.DstSystem, &u.Seq, &u.UploadID, &u.Dst); err != nil {
			return nil, fmt.Errorf("stale uploads: %w", err)
		}
		out = append(out, u)
	}
	return out, rows.Err()
}

// uploads adapts the upload persistence to the short calls a run makes.
func (d *db) uploads(ctx context.Context, id string) (map[int64]*UploadRecord, error) {
	return d.p.UploadsList(ctx, &TransferGetParams{ID: id})
}

func (d *db) saveUpload(ctx context.Context, id string, u UploadRecord) error {
	return d.p.UploadSave(ctx, &UploadSaveParams{ID: id, Upload: u, Now: time.Now()})
}

func (d *db) partDone(ctx context.Context, p *PartDoneParams) (Status, error) {
	return d.p.PartDone(ctx, p)
}

func (d *db) deleteUpload(ctx context.Context, id string, seq int64) error {
	return d.p.UploadDelete(ctx, &RangesResetParams{ID: id, Seq: seq})
}
