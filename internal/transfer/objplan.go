package transfer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/sshapi/sshapi/internal/confine"
	"github.com/sshapi/sshapi/internal/storage"
)

// listPage is how many entries one List call of the plan asks for.
const listPage = 1000

// planObject walks the source through its backend and returns the items: one page of one
// directory at a time (a prefix of 100,000 objects is never listed at once), bounded by the
// plan limits like walk.
func (r *run) planObject(ctx context.Context) ([]Item, error) {
	o := r.obj
	sb, db := o.src.backend(0), o.dst.backend(0)
	src, dst := o.srcPath, strings.TrimSuffix(o.dstPath, "/")
	if dst == "" {
		dst = "/"
	}
	fi, err := sb.Stat(ctx, src)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, permanent(fmt.Errorf("source %s: %w", src, err))
		}
		return nil, fmt.Errorf("source %s: %w", src, err)
	}
	dfi, derr := db.Stat(ctx, dst)
	if derr != nil && !errors.Is(derr, fs.ErrNotExist) {
		return nil, fmt.Errorf("destination %s: %w", dst, derr)
	}
	dstExists := derr == nil
	same := r.t.SameSystem
	switch fi.Type {
	case storage.TypeFile:
		if strings.HasSuffix(o.dstPath, "/") || (dstExists && dfi.Type == storage.TypeDir) {
			dst = path.Join(dst, path.Base(src))
		}
		if same && dst == src {
			return nil, permanent(fmt.Errorf("destination %s is the source file", dst))
		}
		return []Item{objectFileItem(0, src, dst, fi)}, nil
	case storage.TypeDir:
		if !r.t.Recursive {
			return nil, permanent(fmt.Errorf("source %s is a directory: set recursive to copy it", src))
		}
		if dstExists && dfi.Type != storage.TypeDir {
			return nil, permanent(fmt.Errorf("destination %s exists and is not a directory", dst))
		}
		if same && confine.Within(src, dst) {
			return nil, permanent(fmt.Errorf("destination %s is inside the source %s", dst, src))
		}
		return walkBackend(ctx, sb, src, dst, planLimits{items: r.e.cfg.MaxPlanItems, pathBytes: r.e.cfg.MaxPlanPathBytes}, listPage)
	}
	return nil, permanent(fmt.Errorf("source %s is not a regular file or directory", src))
}

func objectFileItem(seq int64, src, dst string, e *storage.Entry) Item {
	return Item{Seq: seq, Kind: KindFile, Source: src, Destination: dst, Size: e.Size, Status: ItemPending,
		mtime: e.ModTime.Unix(), mode: uint32(e.Mode.Perm())}
}

// walkBackend lists the tree under srcRoot breadth first, pageSize entries at a time, as items
// under dstRoot; a directory comes before its contents. Listings report links as links and
// never follow them, and a bucket has none, so the walk cannot leave srcRoot.
func walkBackend(ctx context.Context, b storage.Backend, srcRoot, dstRoot string, lim planLimits, pageSize int) ([]Item, error) {
	items := []Item{{Seq: 0, Kind: KindDir, Source: srcRoot, Destination: dstRoot, Status: ItemPending}}
	pathBytes := int64(len(srcRoot) + len(dstRoot))
	for next := 0; next < len(items); next++ {
		if items[next].Kind != KindDir {
			continue
		}
		dir, ddir := items[next].Source, items[next].Destination
		for cursor := ""; ; {
			if err := ctx.Err(); err != nil {
				return nil, context.Cause(ctx)
			}
			page, err := b.List(ctx, dir, cursor, pageSize)
			if err != nil {
				return nil, fmt.Errorf("list %s: %w", dir, err)
			}
			for i := range page.Entries {
				e := &page.Entries[i]
				if e.Type == storage.TypeOther {
					continue
				}
				if len(items) >= lim.items {
					return nil, permanent(fmt.Errorf("%w: %s has more than %d files, directories and symlinks (transfer.max_plan_items); transfer parts of it separately",
						errPlanTooLarge, srcRoot, lim.items))
				}
				src, dst := path.Join(dir, e.Name), path.Join(ddir, e.Name)
				if pathBytes += int64(len(src) + len(dst)); pathBytes > lim.pathBytes {
					return nil, permanent(fmt.Errorf("%w: the paths under %s exceed %d bytes (transfer.max_plan_path_bytes); transfer parts of it separately",
						errPlanTooLarge, srcRoot, lim.pathBytes))
				}
				seq := int64(len(items))
				switch e.Type {
				case storage.TypeDir:
					items = append(items, Item{Seq: seq, Kind: KindDir, Source: src, Destination: dst, Status: ItemPending, mode: uint32(e.Mode.Perm())})
				case storage.TypeFile:
					items = append(items, objectFileItem(seq, src, dst, e))
				case storage.TypeSymlink:
					items = append(items, Item{Seq: seq, Kind: KindSymlink, Source: src, Destination: dst, Status: ItemPending})
				}
			}
			if cursor = page.Next; cursor == "" {
				break
			}
		}
	}
	return items, nil
}
