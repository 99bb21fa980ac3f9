"""The API: custom-resource models (`models`, the one source of truth), the CRDs generated from
them (`crds`, `crd_resources`) and validated offline as the API server would (`crd_validation`),
names of kinds, labels and annotations (`names`), condition reasons (`reasons`), tenants' API
key records (`apikeys`) and the LoRAAdapter builder (`adapter_manifest`)."""
