package api

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"gopkg.in/yaml.v3"
)

//go:embed openapi.yaml
var openapiYAML []byte

var openapiJSONOnce = sync.OnceValues(func() ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(openapiYAML, &doc); err != nil {
		return nil, fmt.Errorf("parse embedded OpenAPI document: %w", err)
	}
	return json.MarshalIndent(doc, "", "  ")
})

func (s *Server) openapiJSON(w http.ResponseWriter, r *http.Request) error {
	b, err := openapiJSONOnce()
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
	return nil
}

func (s *Server) openapiYAML(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(openapiYAML)
	return nil
}
