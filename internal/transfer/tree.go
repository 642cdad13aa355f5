package transfer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/pkg/sftp"
)

// doDirs creates the destination directories, parents first.
func (r *run) doDirs(ctx context.Context, dirs []*Item) error {
	if len(dirs) == 0 {
		return nil
	}
	r.attempt(dirs)
	byDepth := map[int][]*Item{}
	var depths []int
	for _, d := range dirs {
		n := strings.Count(d.Destination, "/")
		if byDepth[n] == nil {
			depths = append(depths, n)
		}
		byDepth[n] = append(byDepth[n], d)
	}
	sort.Ints(depths)
	for _, depth := range depths {
		level := byDepth[depth]
		forEach(level, 16, func(i int, it *Item) {
			s := r.streams[i%len(r.streams)]
			_, dc, err := s.clients(ctx)
			if err == nil {
				err = mkdir(dc, it.Destination)
			}
			if err == nil && it.mode != 0 {
				err = dc.Chmod(it.Destination, dirMode(it))
			}
			if err != nil {
				s.fail(err)
				r.itemFailed(ctx, it, fmt.Errorf("create directory %s: %w", it.Destination, err))
				return
			}
			r.itemDone(it, "", false)
		})
		if err := r.save(ctx, level); err != nil {
			return err
		}
	}
	return nil
}

// mkdir creates dir (and its parents); an existing directory is fine.
func mkdir(c *sftp.Client, dir string) error {
	err := c.Mkdir(dir)
	if err == nil {
		return nil
	}
	if fi, serr := c.Stat(dir); serr == nil {
		if fi.IsDir() {
			return nil
		}
		return permanent(fmt.Errorf("%s exists and is not a directory", dir))
	}
	if err := c.MkdirAll(dir); err != nil {
		return err
	}
	return nil
}

// errLinkIntoShared fails a symlink item whose destination is someone else's shared files: a run
// holds the owner's guard shared, and putting a link at a name is a restructuring that only an
// exclusive holder may do (see package guard).
var errLinkIntoShared = errors.New("symbolic links are not recreated in a destination shared with you; transfer what the link points to instead")

// doLinks recreates symlinks at the destination (an existing one is replaced only with sync
// "always").
func (r *run) doLinks(ctx context.Context, links []*Item) error {
	if len(links) == 0 {
		return nil
	}
	r.attempt(links)
	if r.dst.Hold != nil {
		for _, it := range links {
			r.itemFailed(ctx, it, permanent(fmt.Errorf("symlink %s: %w", it.Destination, errLinkIntoShared)))
		}
		return r.save(ctx, links)
	}
	forEach(links, 16, func(i int, it *Item) {
		s := r.streams[i%len(r.streams)]
		_, dc, err := s.clients(ctx)
		if err != nil {
			r.itemFailed(ctx, it, err)
			return
		}
		if _, err := dc.Lstat(it.Destination); err == nil {
			if r.t.Sync != SyncAlways {
				r.itemSkipped(it, "")
				return
			}
			_ = dc.Remove(it.Destination)
		}
		if err := dc.Symlink(it.linkTarget, it.Destination); err != nil {
			s.fail(err)
			r.itemFailed(ctx, it, fmt.Errorf("symlink %s: %w", it.Destination, err))
			return
		}
		r.itemDone(it, "", false)
	})
	return r.save(ctx, links)
}
